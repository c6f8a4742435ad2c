package deploytest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

const (
	composeFile   = "../../../deploy/compose.yaml"
	containerfile = "../../../Containerfile"
)

// loadCompose loads deploy/compose.yaml as docker compose does (`docker
// compose config`): compose-go, the Compose specification's reference
// loader, validates it against the specification's schema, interpolates
// ${…} from env (and nothing else), resolves the anchors and merge keys
// and normalizes the services.
func loadCompose(t *testing.T, env ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{composeFile}, cli.WithEnv(env), cli.WithDiscardEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return opts.LoadProject(ctx)
}

// TestComposeFile loads deploy/compose.yaml as docker compose does and
// checks the stack it describes against the image and the example
// configuration: the machines reach no registry to pull PostgreSQL's image
// from, so it is never run here. The migrations run first, once PostgreSQL
// is healthy; the gateway and the sink run the image `make image` tags
// (hookgate:latest), read-only, without capabilities, with
// hookgate.example.yaml mounted where the image reads its configuration;
// the gateway requires an admin token from the environment and listens on
// the host's loopback only; the sink shares its network namespace, so the
// example's forward URLs (127.0.0.1:9099) reach it; every DATABASE_URL
// names PostgreSQL's user, password and database.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	if _, err := loadCompose(t); err == nil || !strings.Contains(err.Error(), "HOOKGATE_ADMIN_TOKEN") {
		t.Errorf("without HOOKGATE_ADMIN_TOKEN the compose file loads (%v), want an error naming it", err)
	}
	token := randHex(32)
	p, err := loadCompose(t, "HOOKGATE_ADMIN_TOKEN="+token)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	if p.Name != "hookgate" {
		t.Errorf("project name %q, want hookgate", p.Name)
	}
	names := p.ServiceNames()
	slices.Sort(names)
	if want := []string{"hookgate", "migrate", "postgres", "sink"}; !slices.Equal(names, want) {
		t.Fatalf("services %q, want %q", names, want)
	}
	env := func(s types.ServiceConfig, k string) string {
		if v := s.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	pg := p.Services["postgres"]
	wantURL := "postgres://" + env(pg, "POSTGRES_USER") + ":" + env(pg, "POSTGRES_PASSWORD") +
		"@postgres:5432/" + env(pg, "POSTGRES_DB") + "?sslmode=disable"
	// Keys compared byte by byte: a linguistic collation costs each
	// delivery a third more of PostgreSQL's CPU (checkCollation warns).
	if args := env(pg, "POSTGRES_INITDB_ARGS"); !slices.Contains(strings.Fields(args), "--locale=C") {
		t.Errorf("postgres: POSTGRES_INITDB_ARGS %q, want --locale=C", args)
	}
	if pg.HealthCheck == nil || len(pg.HealthCheck.Test) == 0 {
		t.Errorf("postgres has no healthcheck: migrate waits for service_healthy")
	}

	example, err := filepath.Abs("../../../hookgate.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	configPath := imageEnv(t)["HOOKGATE_CONFIG"]
	for _, n := range []string{"migrate", "hookgate", "sink"} {
		s := p.Services[n]
		if s.Image != "hookgate:latest" {
			t.Errorf("%s: image %q, want hookgate:latest (make image's tag)", n, s.Image)
		}
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) {
			t.Errorf("%s: read_only %v, cap_drop %q: want read-only and no capabilities", n, s.ReadOnly, s.CapDrop)
		}
		if got := env(s, "DATABASE_URL"); got != wantURL {
			t.Errorf("%s: DATABASE_URL %q, want %q", n, got, wantURL)
		}
		if len(s.Volumes) != 1 || s.Volumes[0].Source != example || s.Volumes[0].Target != configPath || !s.Volumes[0].ReadOnly {
			t.Errorf("%s: volumes %+v, want %s read-only at %s (the image's HOOKGATE_CONFIG)", n, s.Volumes, example, configPath)
		}
	}
	if got := []string(p.Services["migrate"].Command); !slices.Equal(got, []string{"migrate"}) {
		t.Errorf("migrate: command %q, want [migrate]", got)
	}
	if got := []string(p.Services["sink"].Command); !slices.Equal(got, []string{"sink"}) {
		t.Errorf("sink: command %q, want [sink]", got)
	}
	if got := p.Services["hookgate"].Command; got != nil {
		t.Errorf("hookgate: command %q, want the image's (serve)", got)
	}
	if got := p.Services["migrate"].DependsOn["postgres"].Condition; got != types.ServiceConditionHealthy {
		t.Errorf("migrate depends on postgres with %q, want service_healthy", got)
	}
	if got := p.Services["hookgate"].DependsOn["migrate"].Condition; got != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("hookgate depends on migrate with %q, want service_completed_successfully", got)
	}
	if got := p.Services["sink"].NetworkMode; got != "service:hookgate" {
		t.Errorf("sink: network_mode %q, want service:hookgate", got)
	}
	hg := p.Services["hookgate"]
	if len(hg.Ports) != 1 || hg.Ports[0].HostIP != "127.0.0.1" || hg.Ports[0].Published != "8080" || hg.Ports[0].Target != 8080 {
		t.Errorf("hookgate: ports %+v, want 127.0.0.1:8080:8080 only (the example's secrets are public)", hg.Ports)
	}
	if got := env(hg, "HOOKGATE_ADMIN_TOKEN"); got != token {
		t.Errorf("hookgate: HOOKGATE_ADMIN_TOKEN %q, want the environment's", got)
	}
	ex, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ex), "url: http://127.0.0.1:9099/") {
		t.Errorf("hookgate.example.yaml no longer forwards to 127.0.0.1:9099, where the compose file's sink listens")
	}
}

// imageEnv returns the ENV of the Containerfile.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENV ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	if env["HOOKGATE_CONFIG"] == "" {
		t.Fatalf("%s sets no HOOKGATE_CONFIG", containerfile)
	}
	return env
}
