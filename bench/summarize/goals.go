package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The goals table: issue "lean"'s measures, each from one benchmark of the
// run, as the issue states them. A ratio is taken round by round (the i-th
// sample of each library comes from the same round, ./run.sh running every
// selected benchmark once per round), and its median over the rounds is
// what the table shows; with rounds that do not line up, the ratio of the
// medians.

// column is one library of a measure: its benchmark name and its header.
type column struct{ lib, head string }

var (
	colRaw       = column{"raw-setnx-del", "raw"}
	colRedislock = column{"redislock", "bsm/redislock"}
	colRedsync   = column{"redsync", "redsync"}
	colFailFast  = column{"redsync-failfast", "redsync WithFailFast"}
	colOurs      = column{"redlock", "ours"}
	colBare      = column{"bare-scripts", "our scripts alone"}
)

// measure is one row of the goals table.
type measure struct {
	label string
	table string // the summarize table it reads
	unit  string
	cols  []column
	// ref is the column each value is divided by, round by round (its own
	// column reads 1.00); "" for absolute values.
	ref string
	// ours computes the figure the goal is about from the table, and
	// whether it meets the goal; goal says the goal.
	ours func(t *table) (float64, bool)
	goal string
	// also, if set, is said after ours's figure in its cell.
	also func(t *table) string
}

func measures() []measure {
	return []measure{
		{
			label: "uncontended Lock+Unlock p50, × raw", table: "Interleaved/servers=1 (per-op median)", unit: "p50-us",
			cols: []column{colRaw, colRedislock, colRedsync, colOurs, colBare}, ref: colRaw.lib,
			ours: func(t *table) (float64, bool) { r := t.ratio(colOurs.lib, colRaw.lib, "p50-us"); return r, r <= 1.15 },
			goal: "≤ 1.15",
		},
		{
			label: "16 goroutines, a name each: time per pair, × raw", table: "Parallel16", unit: "ns/op",
			cols: []column{colRaw, colRedislock, colRedsync, colOurs, colBare}, ref: colRaw.lib,
			ours: func(t *table) (float64, bool) { r := t.ratio(colOurs.lib, colRaw.lib, "ns/op"); return r, r <= 1.15 },
			goal: "≤ 1.15",
		},
		{
			label: "allocations per pair", table: "Uncontended", unit: "allocs/op",
			cols: []column{colRaw, colRedislock, colRedsync, colOurs, colBare},
			ours: func(t *table) (float64, bool) {
				v := median(t.vals[colOurs.lib]["allocs/op"])
				return v, v > 0 && v <= 36
			},
			goal: "≤ 36",
		},
		{
			label: "Redlock over 5 masters, healthy: pair p50 (µs)", table: "Interleaved/servers=5 (per-op median)", unit: "p50-us",
			cols: []column{colRedsync, colFailFast, colOurs},
			ours: func(t *table) (float64, bool) {
				r := t.ratio(colOurs.lib, colFailFast.lib, "p50-us")
				return median(t.vals[colOurs.lib]["p50-us"]), r > 0 && r <= 1
			},
			goal: "≤ redsync WithFailFast",
			also: func(t *table) string {
				return fmt.Sprintf(" (%.2f × WithFailFast)", t.ratio(colOurs.lib, colFailFast.lib, "p50-us"))
			},
		},
		{
			label: "Redlock allocations per pair", table: "Redlock5", unit: "allocs/op",
			cols: []column{colRedsync, colFailFast, colOurs},
			ours: func(t *table) (float64, bool) {
				v := median(t.vals[colOurs.lib]["allocs/op"])
				return v, v > 0 && v <= 140
			},
			goal: "≤ 140",
		},
		{
			label: "contended, 8 goroutines, hold 0: sections/s, our best mode ÷ best peer mode", table: "ContendedHold0/g=8", unit: "cs/s",
			ours: func(t *table) (float64, bool) {
				var ours, peers []string
				for _, l := range t.libs {
					if strings.HasPrefix(l, "redlock") {
						ours = append(ours, l)
					} else {
						peers = append(peers, l)
					}
				}
				r := t.bestOverBest(ours, peers, "cs/s")
				return r, r >= 1.5
			},
			goal: "≥ 1.5",
		},
		{
			label: "8 Lockers ÷ 8 goroutines of one Locker, hold 1 ms: server commands per section", table: "Fairness", unit: "srv-cmds/cs",
			ours: func(t *table) (float64, bool) {
				r := t.ratio("redlock-lockers", "redlock-goroutines", "srv-cmds/cs")
				return r, r > 0 && r <= 1.5
			},
			goal: "≤ 1.5",
		},
	}
}

// ratio is the median over rounds of a's value over b's in unit.
func (t *table) ratio(a, b, unit string) float64 {
	va, vb := t.vals[a][unit], t.vals[b][unit]
	if len(va) == 0 || len(vb) == 0 {
		return 0
	}
	if len(va) != len(vb) {
		return median(va) / median(vb)
	}
	rs := make([]float64, len(va))
	for i := range va {
		rs[i] = va[i] / vb[i]
	}
	return median(rs)
}

// bestOverBest is the median over rounds of the best (the largest) of
// ours's values over the best of peers' in the same round.
func (t *table) bestOverBest(ours, peers []string, unit string) float64 {
	best := func(libs []string, i int) float64 {
		b := 0.0
		for _, l := range libs {
			if v := t.vals[l][unit]; i < len(v) {
				b = max(b, v[i])
			}
		}
		return b
	}
	var rs []float64
	for i := 0; ; i++ {
		o, p := best(ours, i), best(peers, i)
		if o == 0 || p == 0 {
			break
		}
		rs = append(rs, o/p)
	}
	return median(rs)
}

// cell is one library's figure in a measure: its ratio to ref, or its
// median.
func (m measure) cell(t *table, lib string) float64 {
	if m.ref != "" {
		return t.ratio(lib, m.ref, m.unit)
	}
	return median(t.vals[lib][m.unit])
}

// printGoals writes the goals table in Markdown, and, with svg, the chart
// of the measures given per library side by side.
func printGoals(w io.Writer, svg io.Writer, byTitle map[string]*table) {
	fmt.Fprintln(w, "| measure | raw | bsm/redislock | redsync | ours | our scripts alone | goal | met |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|:-:|")
	var chart []chartGroup
	for _, m := range measures() {
		t := byTitle[m.table]
		if t == nil {
			fmt.Fprintf(w, "| %s | | | | not run | | %s | |\n", m.label, m.goal)
			continue
		}
		cells := map[string]string{}
		g := chartGroup{label: m.label}
		for _, c := range m.cols {
			v := m.cell(t, c.lib)
			if v == 0 {
				continue
			}
			s := format(v)
			if m.ref != "" {
				s = fmt.Sprintf("%.2f", v)
			}
			head := c.head
			if c == colFailFast {
				head = colRedsync.head // shown in the redsync cell, after redsync's own
				s = cells[head] + " (" + s + " WithFailFast)"
			}
			cells[head] = s
			g.bars = append(g.bars, chartBar{lib: c.head, v: v})
		}
		v, met := m.ours(t)
		if m.also != nil {
			cells["ours"] += m.also(t)
		}
		if cells["ours"] == "" || m.cols == nil {
			cells["ours"] = fmt.Sprintf("%.2f", v)
			g.bars = append(g.bars, chartBar{lib: "ours", v: v})
		}
		mark := "no"
		if met {
			mark = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", m.label,
			cells[colRaw.head], cells[colRedislock.head], cells[colRedsync.head], cells[colOurs.head], cells[colBare.head], m.goal, mark)
		chart = append(chart, g.normalized())
	}
	fmt.Fprintln(w)
	if svg != nil {
		writeChart(svg, chart)
	}
}

// A chart group is one measure: a bar per library, each as a multiple of
// the group's first bar (raw, redsync or ours), so that every measure reads
// on one scale: lower is better, except for the sections/s row.
type chartGroup struct {
	label string
	bars  []chartBar
}

type chartBar struct {
	lib string
	v   float64
}

func (g chartGroup) normalized() chartGroup {
	if len(g.bars) < 2 || g.bars[0].v == 0 {
		return g
	}
	out := chartGroup{label: g.label}
	for _, b := range g.bars {
		out.bars = append(out.bars, chartBar{lib: b.lib, v: b.v / g.bars[0].v})
	}
	return out
}

var barColors = map[string]string{
	"raw": "#9e9e9e", "bsm/redislock": "#4e79a7", "redsync": "#f28e2b", "redsync WithFailFast": "#edc948",
	"ours": "#e15759", "our scripts alone": "#76b7b2",
}

// writeChart draws the groups as horizontal bars, one block per measure.
func writeChart(w io.Writer, groups []chartGroup) {
	const (
		width, barH, gap, left = 900, 14, 26, 170
		scaleW                 = width - left - 60
	)
	top := 0.0
	for _, g := range groups {
		for _, b := range g.bars {
			top = max(top, b.v)
		}
	}
	top = math.Ceil(top*2) / 2
	if top == 0 {
		top = 1
	}
	height := 40
	for _, g := range groups {
		height += gap + len(g.bars)*barH
	}
	height += 30
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(w, `<text x="10" y="18" font-size="13" font-weight="bold">Each measure as a multiple of its first bar; a one-bar measure is its ratio (bench/summarize -goals -svg, from the run's data)</text>`+"\n")
	y := 40
	x := func(v float64) float64 { return left + v/top*scaleW }
	for _, g := range groups {
		fmt.Fprintf(w, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+10, html.EscapeString(g.label))
		y += 16
		for _, b := range g.bars {
			fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`, left-6, y+barH-3, html.EscapeString(b.lib))
			fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, left, y+1, x(b.v)-left, barH-2, barColors[b.lib])
			fmt.Fprintf(w, `<text x="%.1f" y="%d">%.2f</text>`+"\n", x(b.v)+4, y+barH-3, b.v)
			y += barH
		}
		y += gap - 16
	}
	for v := 0.0; v <= top+1e-9; v += 0.5 {
		fmt.Fprintf(w, `<line x1="%.1f" y1="36" x2="%.1f" y2="%d" stroke="#ccc" stroke-dasharray="2,3"/>`, x(v), x(v), y)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n", x(v), y+14, v)
	}
	fmt.Fprintln(w, "</svg>")
}
