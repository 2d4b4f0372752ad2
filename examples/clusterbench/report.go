package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// table is every run of every design on one cluster size (masters 0: no
// cluster, the standalone designs only).
type table struct {
	masters int
	version string
	results map[string][]result
}

func (t *table) title() string {
	if t.masters == 0 {
		return "standalone only"
	}
	return fmt.Sprintf("%d master%s (%s)", t.masters, plural(t.masters), t.version)
}

// ratio is d's Redis CPU a decision over its reference's, taken run by run
// (the runs alternate, and the machine's speed drifts between them), then
// the median; false when d is a reference.
func (t *table) ratio(d *design) (float64, bool) {
	return t.ratioOf(d, func(r result) float64 { return r.cpuMicros })
}

// ratioOf is ratio for another figure of a run.
func (t *table) ratioOf(d *design, f func(result) float64) (float64, bool) {
	rs, ref := t.results[d.name], t.results[d.ref]
	if d.ref == "" || len(ref) != len(rs) || len(rs) == 0 {
		return 0, false
	}
	ratios := make([]float64, len(rs))
	for i := range rs {
		ratios[i] = f(rs[i]) / f(ref[i])
	}
	return median(ratios), true
}

// printReferences says which reference each ratio is against.
func printReferences(w io.Writer, cfg *config) {
	var refs []string
	against := map[string][]string{}
	for _, d := range cfg.designs {
		if d.ref == "" {
			continue
		}
		if against[d.ref] == nil {
			refs = append(refs, d.ref)
		}
		against[d.ref] = append(against[d.ref], d.name)
	}
	if len(refs) == 0 {
		return
	}
	parts := make([]string, len(refs))
	for i, ref := range refs {
		what := "single sends"
		if designNamed(ref).batch {
			what = "entry against entry"
		}
		parts[i] = fmt.Sprintf("%s against %s (%s)", strings.Join(against[ref], ", "), ref, what)
	}
	fmt.Fprintf(w, "\n× its reference is the Redis CPU a decision over the reference's, run by run, then the median: %s.\n", strings.Join(parts, "; "))
}

func printTable(w io.Writer, cfg *config, t *table, decisions int) {
	fmt.Fprintf(w, "\n### %s: %d decisions a design, medians of %d run%s\n\n", t.title(), decisions, cfg.runs, plural(cfg.runs))
	fmt.Fprintf(w, "| design | decisions/s (measured) | Redis CPU µs a decision | × its reference | of which executing commands (× its reference) | event-loop wake-ups a decision | decisions/s a master on its own core | busiest master's share | coupon master's share | p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range cfg.designs {
		rs := t.results[d.name]
		if len(rs) == 0 {
			continue
		}
		cpu := medianOf(rs, func(r result) float64 { return r.cpuMicros })
		ratio := "–"
		if x, ok := t.ratio(d); ok {
			ratio = fmt.Sprintf("%.2f × %s", x, d.ref)
		}
		coupon := "–"
		if d.coupon {
			if s := medianOf(rs, result.couponShare); s >= 0 {
				coupon = fmt.Sprintf("%.0f %%", 100*s)
			} else {
				coupon = "?"
			}
		}
		inside := "–"
		if v := medianOf(rs, func(r result) float64 { return r.insideMicros }); v >= 0 {
			inside = fmt.Sprintf("%.1f", v)
			if x, ok := t.ratioOf(d, func(r result) float64 { return r.insideMicros }); ok {
				inside += fmt.Sprintf(" (%.2f ×)", x)
			}
		}
		wakeups := "–"
		if w := medianOf(rs, func(r result) float64 { return r.wakeups }); w >= 0 {
			wakeups = fmt.Sprintf("%.3f", w)
		}
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %s | %s | %s | %.0f | %.0f %% | %s | %s / %s |\n",
			d.name, medianOf(rs, func(r result) float64 { return r.rate }), cpu, ratio, inside, wakeups, 1e6/cpu,
			100*medianOf(rs, func(r result) float64 { return maxShare(r.perNode) }), coupon,
			medianDuration(rs, func(r result) time.Duration { return r.p50 }), medianDuration(rs, func(r result) time.Duration { return r.p99 }))
	}
}

// printSummary is a line a design: its Redis CPU a decision and its ratio
// to its reference on each cluster size.
func printSummary(w io.Writer, cfg *config, tables []*table) {
	fmt.Fprintf(w, "\n### Summary: Redis CPU µs a decision (× its reference)\n\n| design | reference |")
	for _, t := range tables {
		fmt.Fprintf(w, " %s |", t.title())
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---|", len(tables)))
	for _, d := range cfg.designs {
		ref := d.ref
		if ref == "" {
			ref = "–"
		}
		fmt.Fprintf(w, "| %s | %s |", d.name, ref)
		for _, t := range tables {
			rs := t.results[d.name]
			if len(rs) == 0 {
				fmt.Fprintf(w, " – |")
				continue
			}
			cell := fmt.Sprintf("%.1f", medianOf(rs, func(r result) float64 { return r.cpuMicros }))
			if x, ok := t.ratio(d); ok {
				cell += fmt.Sprintf(" (%.2f×)", x)
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
}

func median(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	return v[len(v)/2]
}

func medianOf(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return median(v)
}

func medianDuration(rs []result, f func(result) time.Duration) time.Duration {
	return time.Duration(medianOf(rs, func(r result) float64 { return float64(f(r)) }))
}

func maxShare(s []float64) float64 {
	m := 0.0
	for _, x := range s {
		m = max(m, x)
	}
	return m
}

func shares(s []float64) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(parts, "/")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
