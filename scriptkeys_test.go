package redlock

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockgo/redlock/internal/luasrc"
	"github.com/redlockgo/redlock/internal/scripts"
)

// TestScriptKeysDeclared: every key a script reads or writes comes from
// KEYS, directly, through a local, or through a parameter of a function of
// _lib.lua whose every caller passes it one. On Redis Cluster, Redis checks
// only declared keys before it runs a script: a key the script builds
// itself fails the call at that line once a slot migration has moved it.
// The checker is shown to fail on snippets that break the rule.
func TestScriptKeysDeclared(t *testing.T) {
	t.Parallel()
	lib := string(scripts.Embedded("_lib.lua"))
	files, err := fs.Glob(scripts.FS, "*.lua")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		name := path.Base(f)
		if name == "_lib.lua" {
			continue
		}
		body := string(scripts.Embedded(name))
		for _, v := range undeclaredKeys(lib, body) {
			t.Errorf("%s: %s", name, v)
		}
		checked++
	}
	assert.GreaterOrEqual(t, checked, 20, "scripts checked")

	bad := map[string]string{
		"built key":           `redis.call('GET', KEYS[1] .. ':x')`,
		"literal key":         `redis.call('DEL', 'k')`,
		"local built":         "local q = KEYS[1] .. ':queue'\nredis.call('ZCARD', q)",
		"argv key":            `redis.call('SET', ARGV[1], 'v')`,
		"second key of DEL":   `redis.call('DEL', KEYS[1], KEYS[1] .. ':x')`,
		"through a lib param": `enqueue(KEYS[1] .. ':queue', ARGV[1])`,
		"through a lib list":  `mint('1', {KEYS[1], KEYS[1] .. ':fence'}, '', 1000)`,
		"unknown command":     `redis.call('FROB', KEYS[1])`,
		"pcall":               `redis.pcall('SET', KEYS[1] .. ':m', 'v')`,
	}
	for what, snippet := range bad {
		assert.NotEmpty(t, undeclaredKeys(lib, snippet), "undeclaredKeys(%s) = none, want the violation found", what)
	}
	good := "local readers = KEYS[3]\nlocal fences = {}\nfor i = 1, 2 do fences[i] = KEYS[i] end\n" +
		"redis.call('EXISTS', readers)\nmint('1', fences, '', 1000)\npass(KEYS[1], KEYS[2], KEYS[1] .. ':rel', 'x', 100)"
	assert.Empty(t, undeclaredKeys(lib, good), "undeclaredKeys(a snippet that declares its keys)")
}

// keyArgs says which arguments of a Redis command, after its name, are
// keys: from the first, n of them (-1: all). A command the scripts use
// that is not here fails the check, so that a new one is looked at.
var keyArgs = map[string]int{
	"GET": 1, "MGET": -1, "SET": 1, "DEL": -1, "RENAME": 2, "EXISTS": -1, "PTTL": 1, "PEXPIRE": 1, "PEXPIREAT": 1,
	"ZADD": 1, "ZREM": 1, "ZSCORE": 1, "ZRANGE": 1, "ZRANGEBYSCORE": 1, "ZREVRANGEBYSCORE": 1,
	"ZREMRANGEBYSCORE": 1, "ZCOUNT": 1, "ZCARD": 1, "HSET": 1, "HGET": 1, "INCR": 1,
	"LPOP": 1, "RPUSH": 1, "LREM": 1, "LINDEX": 1, "LLEN": 1,
	// No keys: the server's clock, and channels (not keys; the client names
	// them after the lock key's hash tag).
	"TIME": 0, "PUBLISH": 0, "SPUBLISH": 0,
}

// luaChunk is a script body or a function of _lib.lua, comments cut.
type luaChunk struct {
	name   string   // "" for the script body
	params []string // a function's
	src    string
}

var (
	luaFuncDef  = regexp.MustCompile(`(?ms)^local function (\w+)\(([^)]*)\)\n(.*?)^end\n`)
	luaRedisRun = regexp.MustCompile(`redis\.p?call\(`)
	luaKeysRef  = regexp.MustCompile(`^KEYS\[[^\[\]]+\]$`)
	luaIdent    = regexp.MustCompile(`^[A-Za-z_]\w*$`)
	luaIndexed  = regexp.MustCompile(`^([A-Za-z_]\w*)\[[^\[\]]+\]$`)
)

// undeclaredKeys returns a line per key argument of body (with the
// functions of lib it calls) that does not come from KEYS.
func undeclaredKeys(lib, body string) []string {
	chunks := []luaChunk{{src: cutLuaComments(body)}}
	for _, m := range luaFuncDef.FindAllStringSubmatch(cutLuaComments(luasrc.Funcs(lib, body)), -1) {
		var params []string
		for p := range strings.SplitSeq(m[2], ",") {
			params = append(params, strings.TrimSpace(p))
		}
		chunks = append(chunks, luaChunk{name: m[1], params: params, src: m[3]})
	}
	byName := map[string]*luaChunk{}
	for i := range chunks {
		if chunks[i].name != "" {
			byName[chunks[i].name] = &chunks[i]
		}
	}
	// need[f][i]: parameter i of f must be a key ("key") or a list of keys
	// ("list"); grown until no caller adds one.
	need := map[string]map[int]string{}
	var out []string
	for range 10 { // bounded: each round adds a need, and there are few parameters
		out = out[:0]
		grew := false
		for _, c := range chunks {
			judge := func(expr, as, where string) {
				for _, r := range judgeKey(c, expr, as, 0) {
					if r.param < 0 {
						out = append(out, fmt.Sprintf("%s: %q is not from KEYS", where, expr))
						continue
					}
					if need[c.name] == nil {
						need[c.name] = map[int]string{}
					}
					if need[c.name][r.param] == "" {
						need[c.name][r.param], grew = r.as, true
					}
				}
			}
			for _, call := range luaCalls(c.src, luaRedisRun) {
				cmd := strings.ToUpper(strings.Trim(call[0], `'"`))
				n, ok := keyArgs[cmd]
				if call[0] == "PUBLISH_COMMAND" {
					n, ok = 0, true
				}
				if !ok {
					out = append(out, fmt.Sprintf("redis.call(%s, ...): a command TestScriptKeysDeclared does not know", call[0]))
					continue
				}
				if n < 0 || n > len(call)-1 {
					n = len(call) - 1
				}
				for _, a := range call[1 : 1+n] {
					judge(a, "key", fmt.Sprintf("%s redis.call(%s)", c.where(), call[0]))
				}
			}
			for f, idx := range need {
				if f == "" {
					continue
				}
				for _, call := range luaCalls(c.src, regexp.MustCompile(`\b`+f+`\(`)) {
					for i, as := range idx {
						if i < len(call) {
							judge(call[i], as, fmt.Sprintf("%s call of %s, argument %d", c.where(), f, i+1))
						}
					}
				}
			}
		}
		if !grew {
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (c luaChunk) where() string {
	if c.name == "" {
		return "body"
	}
	return "function " + c.name
}

// judged is one source an expression's key comes from that is not KEYS:
// parameter param of the chunk's function (a key or a list of keys), or
// nothing declared (param -1).
type judged struct {
	param int
	as    string
}

// judgeKey traces expr, used in c as a key (as "key") or a list of keys
// ("list"), back to KEYS, and returns what it could not.
func judgeKey(c luaChunk, expr, as string, depth int) []judged {
	expr = strings.TrimSpace(expr)
	if depth > 8 {
		return []judged{{param: -1}}
	}
	// A declared key where a list is wanted declares what it names as well
	// (mint takes one key or a list of them).
	if luaKeysRef.MatchString(expr) {
		return nil
	}
	if as == "list" && strings.HasPrefix(expr, "{") && strings.HasSuffix(expr, "}") {
		var res []judged
		for _, e := range splitLuaArgs(expr[1 : len(expr)-1]) {
			res = append(res, judgeKey(c, e, "key", depth+1)...)
		}
		return res
	}
	if m := luaIndexed.FindStringSubmatch(expr); as == "key" && m != nil && m[1] != "KEYS" {
		return judgeKey(c, m[1], "list", depth+1)
	}
	if !luaIdent.MatchString(expr) {
		return []judged{{param: -1}}
	}
	if i := slices.Index(c.params, expr); i >= 0 {
		return []judged{{param: i, as: as}}
	}
	var res []judged
	found := false
	// for _, x in ipairs(list): x is a key of list.
	for _, m := range regexp.MustCompile(`for\s+\w+\s*,\s*`+expr+`\s+in\s+ipairs\(([^)]*)\)`).FindAllStringSubmatch(c.src, -1) {
		found = true
		res = append(res, judgeKey(c, m[1], "list", depth+1)...)
	}
	// local x = e, x = e; and for a list, x[i] = e (each an element).
	for _, m := range regexp.MustCompile(`(?m)(?:^|[\s;])(?:local\s+)?`+expr+`\s*=\s*([^=\n].*)$`).FindAllStringSubmatch(c.src, -1) {
		found = true
		e := strings.TrimSpace(m[1])
		if e, _, _ = strings.Cut(e, " end"); as == "list" && e == "{}" {
			continue
		}
		res = append(res, judgeKey(c, e, as, depth+1)...)
	}
	if as == "list" {
		for _, m := range regexp.MustCompile(`\b`+expr+`\[[^\]]+\]\s*=\s*([^=\n]+?)(?:\s+end)?\s*$`).FindAllStringSubmatch(c.src, -1) {
			found = true
			res = append(res, judgeKey(c, m[1], "key", depth+1)...)
		}
	}
	if !found {
		return []judged{{param: -1}}
	}
	return res
}

// luaCalls returns the argument lists of the calls in src that start where
// call matches (up to and including the opening parenthesis).
func luaCalls(src string, call *regexp.Regexp) [][]string {
	var calls [][]string
	for _, loc := range call.FindAllStringIndex(src, -1) {
		if strings.HasSuffix(strings.TrimSpace(src[:loc[0]]), "function") {
			continue // a definition, not a call
		}
		depth, end := 1, -1
		for i, quote := loc[1], byte(0); i < len(src) && end < 0; i++ {
			switch ch := src[i]; {
			case quote != 0:
				if ch == '\\' {
					i++
				} else if ch == quote {
					quote = 0
				}
			case ch == '\'' || ch == '"':
				quote = ch
			case ch == '(' || ch == '{' || ch == '[':
				depth++
			case ch == ')' || ch == '}' || ch == ']':
				if depth--; depth == 0 {
					end = i
				}
			}
		}
		if end >= 0 {
			calls = append(calls, splitLuaArgs(src[loc[1]:end]))
		}
	}
	return calls
}

// splitLuaArgs splits s at its top-level commas.
func splitLuaArgs(s string) []string {
	var args []string
	depth, start := 0, 0
	for i, quote := 0, byte(0); i < len(s); i++ {
		switch ch := s[i]; {
		case quote != 0:
			if ch == '\\' {
				i++
			} else if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(' || ch == '{' || ch == '[':
			depth++
		case ch == ')' || ch == '}' || ch == ']':
			depth--
		case ch == ',' && depth == 0:
			args = append(args, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" || len(args) > 0 {
		args = append(args, rest)
	}
	return args
}

// cutLuaComments drops "--" comments (outside strings) up to the end of
// their line.
func cutLuaComments(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		quote := byte(0)
		cut := len(line)
		for i := 0; i < len(line); i++ {
			ch := line[i]
			switch {
			case quote != 0:
				if ch == '\\' {
					i++
				} else if ch == quote {
					quote = 0
				}
			case ch == '\'' || ch == '"':
				quote = ch
			case ch == '-' && i+1 < len(line) && line[i+1] == '-':
				cut = i
				i = len(line)
			}
		}
		b.WriteString(strings.TrimRight(line[:cut], " \t\n"))
		b.WriteString("\n")
	}
	return b.String()
}
