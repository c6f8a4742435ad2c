package main

import "testing"

func TestWithoutPoolParams(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h/db":                                       "postgres://u@h/db",
		"postgres://u@h/db?pool_max_conns=8":                      "postgres://u@h/db",
		"postgres://u@h/db?sslmode=disable&pool_max_conns=8":      "postgres://u@h/db?sslmode=disable",
		"postgres://u@h/db?pool_max_conns=8&sslmode=disable":      "postgres://u@h/db?sslmode=disable",
		"postgres://u@h/db?pool_min_conns=1&pool_max_conns=8&a=b": "postgres://u@h/db?a=b",
		"host=h dbname=db pool_max_conns=8 sslmode=disable":       "host=h dbname=db sslmode=disable",
		"host=h pool_max_conns=8":                                 "host=h",
	} {
		if got := withoutPoolParams(in); got != want {
			t.Errorf("withoutPoolParams(%q) = %q, want %q", in, got, want)
		}
	}
}
