// Package luasrc assembles the library's Lua scripts: a script's body with
// the functions of the shared library (internal/scripts/_lib.lua) it calls in front,
// and the named constants written in. The library (internal/scripts) and the
// bench's bare-scripts row (the server's share of a lock, measured without
// the library's client code) both use it, so they run the same text.
package luasrc

import (
	"fmt"
	"regexp"
	"strings"
)

// libFunc finds a library function: a "local function name(" line up to
// the first "end" line at the start of a line; the comments between
// functions are left out.
var libFunc = regexp.MustCompile(`(?ms)^local function (\w+)\(.*?^end\n`)

// constName finds the constants a script names.
var constName = regexp.MustCompile(`\b(?:REPLY|SUFFIX|PREFIX|VALUE|PUBLISH)_[A-Z_]+\b`)

// Marker is a line a script's body may hold once, at the top level of its
// chunk (not inside a block, a long comment or a long string), after the
// code of its common path: the functions of lib that only the code after
// it calls are defined there instead of in front, so that a run that
// returns before it makes none of their closures. The functions the code
// before it calls, and theirs, stay in front. Assemble checks neither the
// level nor two rules the script's author keeps: the code before the line
// names a function of lib only by calling it ("name(", as Funcs finds
// calls), and declares no name at its top level that a function after the
// line uses without declaring it (it would bind to the script's local).
// TestScripts runs every script's paths, which is where a broken rule shows.
const Marker = "--@lib\n"

// markerLine finds a Marker line: a line of its own, not those characters
// within a line of comment.
var markerLine = regexp.MustCompile(`(?m)^--@lib\n`)

// Assemble returns body with the functions of lib that it calls (and that
// they call), in lib's order, in front (or, for those that only the code
// after a Marker line calls, at that line), and each constant it names
// (REPLY_..., SUFFIX_..., PREFIX_..., PUBLISH_...) replaced by consts's text for it. A
// function a script defines is a closure made on every run, and the Lua
// garbage it leaves is collected by the server's one thread: a script
// carries only what it runs. A constant consts does not know is an error,
// and so is more than one Marker.
func Assemble(lib, body string, consts func(name string) (string, bool)) (string, error) {
	marks := markerLine.FindAllStringIndex(body, -1)
	if len(marks) > 1 {
		return "", fmt.Errorf("more than one %q line", strings.TrimSpace(Marker))
	}
	split := len(marks) == 1
	var before, after string
	if split {
		before, after = body[:marks[0][0]], body[marks[0][1]:]
	}
	all := needed(lib, body)
	funcs := emit(lib, func(f string) bool { return all[f] })
	if split {
		front := needed(lib, before)
		funcs = emit(lib, func(f string) bool { return front[f] }) + before +
			emit(lib, func(f string) bool { return all[f] && !front[f] })
		body = after
	}
	var unknown []string
	src := constName.ReplaceAllStringFunc(funcs+body, func(c string) string {
		v, ok := consts(c)
		if !ok {
			unknown = append(unknown, c)
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown constants %s", strings.Join(unknown, ", "))
	}
	return src, nil
}

// Funcs returns the functions of lib that body calls, directly or through
// one another, in lib's order.
func Funcs(lib, body string) string {
	need := needed(lib, body)
	return emit(lib, func(f string) bool { return need[f] })
}

// needed is the set of lib's functions that body calls, directly or
// through one another.
func needed(lib, body string) map[string]bool {
	funcs := libFunc.FindAllStringSubmatch(lib, -1)
	need := make(map[string]bool, len(funcs))
	for grew := true; grew; {
		grew = false
		for _, f := range funcs {
			if need[f[1]] {
				continue
			}
			calls := strings.Contains(body, f[1]+"(")
			for _, g := range funcs {
				calls = calls || (need[g[1]] && strings.Contains(g[0], f[1]+"("))
			}
			if calls {
				need[f[1]], grew = true, true
			}
		}
	}
	return need
}

// emit returns the functions of lib that pick picks, in lib's order.
func emit(lib string, pick func(name string) bool) string {
	var b strings.Builder
	for _, f := range libFunc.FindAllStringSubmatch(lib, -1) {
		if pick(f[1]) {
			b.WriteString(f[0])
		}
	}
	return b.String()
}

// Constants returns the constants src names, in order, repeats included.
func Constants(src string) []string { return constName.FindAllString(src, -1) }
