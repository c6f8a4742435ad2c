package config

import (
	"reflect"
	"strings"
)

// Changes is what differs between two configurations, by name: the
// senders and targets added, removed and changed. It holds names only,
// never a value. A changed secret is named by its field.
type Changes struct {
	SendersAdded, SendersRemoved []string
	// SendersChanged are the senders of both whose own settings differ.
	// Their targets are compared one by one.
	SendersChanged []Changed
	// Targets* name every target added, removed or changed, also those of
	// a sender added or removed.
	TargetsAdded, TargetsRemoved []TargetName
	TargetsChanged               []Changed
}

// TargetName names a target of a sender.
type TargetName struct {
	Sender, Target string
}

// String is sender/target.
func (n TargetName) String() string { return n.Sender + "/" + n.Target }

// Changed is a sender or a target whose settings differ, with the YAML
// names of the fields that do. Target is "" for a sender.
type Changed struct {
	TargetName
	Fields []string
}

// None reports whether nothing differs.
func (c Changes) None() bool {
	return len(c.SendersAdded)+len(c.SendersRemoved)+len(c.SendersChanged)+
		len(c.TargetsAdded)+len(c.TargetsRemoved)+len(c.TargetsChanged) == 0
}

// Diff returns what differs from the configuration from to to, in to's
// order, or from's for what was removed. Senders and targets are matched
// by name. A sender's fields are compared except its forward list, whose
// targets are compared one by one.
func Diff(from, to *Config) Changes {
	var c Changes
	for i := range to.Senders {
		cur := &to.Senders[i]
		prev, ok := from.Sender(cur.Name)
		if !ok {
			c.SendersAdded = append(c.SendersAdded, cur.Name)
			for _, t := range cur.Forward {
				c.TargetsAdded = append(c.TargetsAdded, TargetName{cur.Name, t.Name})
			}
			continue
		}
		if fields := differing(reflect.ValueOf(*prev), reflect.ValueOf(*cur)); len(fields) > 0 {
			c.SendersChanged = append(c.SendersChanged, Changed{TargetName{Sender: cur.Name}, fields})
		}
		for j := range cur.Forward {
			ct := &cur.Forward[j]
			pt, ok := prev.Target(ct.Name)
			if !ok {
				c.TargetsAdded = append(c.TargetsAdded, TargetName{cur.Name, ct.Name})
				continue
			}
			if fields := differing(reflect.ValueOf(*pt), reflect.ValueOf(*ct)); len(fields) > 0 {
				c.TargetsChanged = append(c.TargetsChanged, Changed{TargetName{cur.Name, ct.Name}, fields})
			}
		}
		for _, pt := range prev.Forward {
			if _, ok := cur.Target(pt.Name); !ok {
				c.TargetsRemoved = append(c.TargetsRemoved, TargetName{cur.Name, pt.Name})
			}
		}
	}
	for i := range from.Senders {
		prev := &from.Senders[i]
		if _, ok := to.Sender(prev.Name); !ok {
			c.SendersRemoved = append(c.SendersRemoved, prev.Name)
			for _, t := range prev.Forward {
				c.TargetsRemoved = append(c.TargetsRemoved, TargetName{prev.Name, t.Name})
			}
		}
	}
	return c
}

// differing returns the YAML names of the fields whose values differ
// between a and b, two structs of one type. It skips a sender's forward
// list and the fields that Parse derives, which differ only when their
// sources do.
func differing(a, b reflect.Value) []string {
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" || name == "forward" {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}
