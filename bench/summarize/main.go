// Command summarize turns the output of the bench module's benchmarks into
// Markdown tables: the median of every metric per library, and each
// library's ns/op as a ratio of ours (the "redlock" row).
//
//	go run ./summarize results/latest.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// base is the row every ratio is relative to.
const base = "redlock"

// unitOrder puts the metrics in a readable order; others follow sorted.
var unitOrder = []string{
	"p50-us", "ns/op", "ns/cs", "B/op", "allocs/op",
	"cmds/op", "cmds/cs", "scripts/op", "scripts/cs", "subs/op", "subs/cs",
	"pings/op", "pings/cs", "ping-us",
	"srv-cpu-us/op", "srv-cpu-us/cs",
	"gap-p50-us", "gap-pings", "busy-pct", "wait-p99-ms", "top-share-pct",
}

var procSuffix = regexp.MustCompile(`-\d+$`)

type table struct {
	title string
	libs  []string                        // in first-seen order
	vals  map[string]map[string][]float64 // lib -> unit -> samples
	units map[string]bool
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: summarize [-goals [-svg chart.svg]] results.txt...")
		flag.PrintDefaults()
	}
	goals := flag.Bool("goals", false, "print issue \"lean\"'s goals table instead of the tables")
	svgPath := flag.String("svg", "", "with -goals: write the chart of the goals table to this SVG file")
	flag.Parse()
	var tables []*table
	byTitle := map[string]*table{}
	get := func(title, lib string) *table {
		t := byTitle[title]
		if t == nil {
			t = &table{title: title, vals: map[string]map[string][]float64{}, units: map[string]bool{}}
			byTitle[title] = t
			tables = append(tables, t)
		}
		if t.vals[lib] == nil {
			t.vals[lib] = map[string][]float64{}
			t.libs = append(t.libs, lib)
		}
		return t
	}
	read := func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
				continue
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				continue
			}
			// BenchmarkTop/lib/params-N: one table per Top/params.
			parts := strings.Split(procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), ""), "/")
			if len(parts) < 2 {
				continue
			}
			lib := parts[1]
			title := strings.Join(append([]string{parts[0]}, parts[2:]...), "/")
			t := get(title, lib)
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					continue
				}
				unit := f[i+1]
				if op, ok := strings.CutSuffix(unit, "-median-us"); ok && parts[0] == "Interleaved" {
					// BenchmarkInterleaved: one metric per library; a row each.
					it := get(parts[0]+"/"+parts[1]+" (per-op median)", op)
					it.vals[op]["p50-us"] = append(it.vals[op]["p50-us"], v)
					it.units["p50-us"] = true
					continue
				}
				if parts[0] == "Interleaved" {
					continue // ns/op of a whole rotation, B/op: not per library
				}
				if unit == "ns/op" && strings.HasPrefix(title, "Contended") {
					unit = "ns/cs" // one op is one critical section there
				}
				t.vals[lib][unit] = append(t.vals[lib][unit], v)
				t.units[unit] = true
			}
		}
		return sc.Err()
	}
	if flag.NArg() == 0 {
		if err := read(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = read(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *goals {
		var svg io.Writer
		if *svgPath != "" {
			f, err := os.Create(*svgPath)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer f.Close()
			svg = f
		}
		printGoals(os.Stdout, svg, byTitle)
		return
	}
	for _, t := range tables {
		if strings.HasPrefix(t.title, "Interleaved") {
			// Rows came in metric-name order: ping first, then ours, then the rest.
			rank := func(l string) int {
				switch {
				case l == "ping":
					return 0
				case strings.HasPrefix(l, base):
					return 1
				}
				return 2
			}
			slices.SortStableFunc(t.libs, func(a, b string) int { return rank(a) - rank(b) })
		}
		t.print(os.Stdout)
	}
}

func (t *table) print(w io.Writer) {
	var units []string
	for _, u := range unitOrder {
		if t.units[u] {
			units = append(units, u)
		}
	}
	var rest []string
	for u := range t.units {
		if !slices.Contains(units, u) {
			rest = append(rest, u)
		}
	}
	slices.Sort(rest)
	units = append(units, rest...)
	if len(units) == 0 {
		return
	}
	timeUnit := units[0] // p50-us, ns/op or ns/cs
	_, hasPing := t.vals["ping"]
	fmt.Fprintf(w, "### %s\n\n", t.title)
	fmt.Fprintf(w, "| library | n | %s | × %s |", timeUnit, base)
	if hasPing {
		fmt.Fprint(w, " × ping |")
	}
	for _, u := range units[1:] {
		fmt.Fprintf(w, " %s |", u)
	}
	fmt.Fprintf(w, "\n|---|--:|--:|--:|%s\n", strings.Repeat("--:|", len(units)-1+btoi(hasPing)))
	baseTime := median(t.vals[base][timeUnit])
	pingTime := median(t.vals["ping"][timeUnit])
	for _, lib := range t.libs {
		v := t.vals[lib]
		ratio := "–"
		if m := median(v[timeUnit]); baseTime > 0 && m > 0 {
			ratio = fmt.Sprintf("%.2f", m/baseTime)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s |", lib, len(v[timeUnit]), format(median(v[timeUnit])), ratio)
		if hasPing {
			fmt.Fprintf(w, " %.1f |", median(v[timeUnit])/pingTime)
		}
		for _, u := range units[1:] {
			if len(v[u]) == 0 {
				fmt.Fprint(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %s |", format(median(v[u])))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func format(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
