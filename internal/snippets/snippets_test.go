package snippets

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository, from this package's directory.
const root = "../.."

// otelModule is the import path of the module of its own under otel/,
// whose export data is listed from there.
const otelModule = "github.com/redlockgo/redlock/otel"

// block is one ```go block of a Markdown file.
type block struct {
	file     string // as errors name it: "README.md", "docs/cli.md"
	line     int    // of the block's first line of code
	code     string
	fragment bool
}

// blocks returns the ```go blocks of the Markdown text of file.
func blocks(file string, text []byte) ([]block, error) {
	var out []block
	var cur *block
	var code strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{file: file, line: n + 1}
			code.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = code.String()
			first, _, _ := strings.Cut(cur.code, "\n")
			cur.fragment = strings.TrimSpace(first) == "// fragment"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line + "\n")
		}
	}
	if cur != nil {
		return out, fmt.Errorf("%s:%d: ```go block never closed", file, cur.line-1)
	}
	return out, sc.Err()
}

// fragmentImports are the imports every fragment gets; those it leaves
// unused are not errors.
var fragmentImports = []string{
	"context", "errors", "fmt", "log", "os", "testing", "time",
	"github.com/redis/go-redis/v9",
	"github.com/redlockgo/redlock",
	"github.com/redlockgo/redlock/redlocktest",
}

// source is the Go file that b stands for: b itself, or a fragment wrapped
// in a function of package fragment. A //line comment maps positions back
// to the Markdown file.
func source(b block) string {
	at := fmt.Sprintf("//line %s:%d\n", b.file, b.line)
	if !b.fragment {
		return at + b.code
	}
	var s strings.Builder
	s.WriteString("package fragment\n\nimport (\n")
	for _, p := range fragmentImports {
		s.WriteString("\t" + strconv.Quote(p) + "\n")
	}
	s.WriteString(")\n\n")
	var body strings.Builder
	for line := range strings.Lines(b.code) {
		// A fragment's own imports go up to the file's; the blank line
		// left keeps the line numbers.
		if strings.HasPrefix(line, "import ") {
			s.WriteString(line)
			body.WriteString("\n")
			continue
		}
		body.WriteString(line)
	}
	s.WriteString("func _() error {\n" + at + body.String() + "\treturn nil\n}\n")
	return s.String()
}

// unusedOK reports whether msg is an error the check lets a fragment have:
// an unused variable or import (a fragment shows a call, not its use).
func unusedOK(msg string) bool {
	// "declared and not used: x", "\"fmt\" imported and not used",
	// "\"github.com/redis/go-redis/v9\" imported as redis and not used".
	return strings.HasPrefix(msg, "declared and not used") || strings.HasSuffix(msg, " and not used")
}

// checker type-checks snippets against the export data of the packages
// they import, as the go command built them.
type checker struct {
	fset    *token.FileSet
	imp     types.Importer
	prelude *ast.File
	// skipOtel: the otel module's export data could not be listed (see
	// newChecker); blocks that import it are not checked.
	skipOtel bool
}

// newChecker lists the export data of paths (and their dependencies), in
// the root module and, for the otel module's packages, in otel/.
func newChecker(t *testing.T, paths []string) *checker {
	t.Helper()
	var inRoot, inOtel []string
	for _, p := range paths {
		if p == otelModule || strings.HasPrefix(p, otelModule+"/") {
			inOtel = append(inOtel, p)
		} else {
			inRoot = append(inRoot, p)
		}
	}
	exports := map[string]string{}
	skipOtel := false
	for _, l := range []struct {
		dir   string
		paths []string
	}{{root, inRoot}, {filepath.Join(root, "otel"), inOtel}} {
		if len(l.paths) == 0 {
			continue
		}
		args := append([]string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}\t{{.Export}}{{end}}"}, l.paths...)
		cmd := exec.Command("go", args...)
		cmd.Dir = l.dir
		out, err := cmd.Output()
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		if err != nil && l.dir != root && os.Getenv("CI") != "true" {
			// otel/ is a module of its own, whose dependencies a fresh
			// clone may not have (offline): its blocks are skipped then,
			// never under CI.
			t.Logf("skipping the blocks that import %s: go list in otel/: %v\n%s", otelModule, err, stderr)
			skipOtel = true
			continue
		}
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", l.dir, err, stderr)
		}
		for line := range strings.Lines(string(out)) {
			if path, file, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok {
				if _, seen := exports[path]; !seen {
					exports[path] = file
				}
			}
		}
	}
	fset := token.NewFileSet()
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q (is it in go.mod?)", path)
		}
		return os.Open(file)
	}
	prelude, err := os.ReadFile("prelude.go.txt")
	require.NoError(t, err)
	pf, err := parser.ParseFile(fset, "prelude.go.txt", prelude, parser.SkipObjectResolution)
	require.NoError(t, err)
	return &checker{fset: fset, imp: importer.ForCompiler(fset, "gc", lookup), prelude: pf, skipOtel: skipOtel}
}

// imports returns the import paths of b, and of the prelude for a fragment.
func imports(b block) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", source(b), parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		out = append(out, p)
	}
	return out, nil
}

// check returns what is wrong with b: not Go, a whole file without its
// package clause, or a type error (a stale identifier, say).
func (c *checker) check(b block) []string {
	f, err := parser.ParseFile(c.fset, "", source(b), parser.SkipObjectResolution)
	if err != nil {
		var list []string
		var el scanner.ErrorList
		if errors.As(err, &el) {
			for _, e := range el {
				list = append(list, e.Error())
			}
			return list
		}
		return []string{err.Error()}
	}
	if c.skipOtel && slices.ContainsFunc(f.Imports, func(is *ast.ImportSpec) bool {
		return strings.HasPrefix(strings.Trim(is.Path.Value, `"`), otelModule)
	}) {
		return nil
	}
	files := []*ast.File{f}
	if b.fragment {
		files = append(files, c.prelude)
	}
	var problems []string
	conf := types.Config{
		Importer: c.imp,
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && b.fragment && unusedOK(te.Msg) {
				return
			}
			problems = append(problems, err.Error())
		},
	}
	_, _ = conf.Check(f.Name.Name, c.fset, files, nil)
	return problems
}

// TestDocSnippetsCompile: every ```go block of README.md and docs/*.md
// compiles against this module as it is (issue 39: placeholders such as
// "if err != nil { ... }", an undefined tick, and redlock.Election, which
// does not exist, had stood in the README unnoticed).
func TestDocSnippetsCompile(t *testing.T) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "no docs/*.md")
	for _, d := range docs {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	var all []block
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		bs, err := blocks(f, text)
		require.NoError(t, err)
		all = append(all, bs...)
	}
	require.NotEmpty(t, all)
	c := checkerFor(t, all)
	for _, b := range all {
		for _, p := range c.check(b) {
			t.Errorf("%s (the ```go block at %s:%d)", p, b.file, b.line)
		}
	}
}

// TestQuickStartIsExamplesBasic: the README's quick start is the program
// that "go run ./examples/basic" runs, word for word, so that the command
// the README gives runs the code it shows.
func TestQuickStartIsExamplesBasic(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	bs, err := blocks("README.md", text)
	require.NoError(t, err)
	require.NotEmpty(t, bs)
	prog, err := os.ReadFile(filepath.Join(root, "examples", "basic", "main.go"))
	require.NoError(t, err)
	assert.Equal(t, string(prog), bs[0].code, "README.md's first ```go block (line %d) differs from examples/basic/main.go", bs[0].line)
}

// TestCheckCatchesStale: the check fails the snippets the issue found, so
// TestDocSnippetsCompile passing means something.
func TestCheckCatchesStale(t *testing.T) {
	md := "text\n" +
		"```go\n// fragment\ne := redlock.Election(\"scheduler\")\n_ = e\n```\n" + // no such function
		"```go\n// fragment\nlock, err := locker.Lock(ctx, \"x\")\nif err != nil { ... }\n```\n" + // placeholder
		"```go\n// fragment\nfor range tick.C {\n}\n```\n" + // undefined tick
		"```go\nlock, err := locker.Lock(ctx, \"x\")\n```\n" + // neither a file nor marked
		"```go\npackage main\n\nimport \"github.com/redlockgo/redlock\"\n\nfunc main() { redlock.NewLocker() }\n```\n" + // wrong arguments
		"```go\n// fragment\nlock, err := locker.Lock(ctx, \"x\")\n```\n" // fine: unused is allowed
	bs, err := blocks("stale.md", []byte(md))
	require.NoError(t, err)
	require.Len(t, bs, 6)
	c := checkerFor(t, bs)
	want := []string{"Election", "expected", "tick", "expected 'package'", "NewLocker", ""}
	for i, b := range bs {
		problems := strings.Join(c.check(b), "\n")
		if want[i] == "" {
			assert.Empty(t, problems, "block %d", i)
			continue
		}
		assert.Contains(t, problems, want[i], "block %d:\n%s", i, b.code)
		// The position is the Markdown file's, inside the block.
		m := regexp.MustCompile(`^stale\.md:(\d+):`).FindStringSubmatch(problems)
		if assert.NotNil(t, m, "block %d: %s", i, problems) {
			n, _ := strconv.Atoi(m[1])
			assert.True(t, n >= b.line && n < b.line+strings.Count(b.code, "\n"), "block %d at line %d: %s", i, b.line, problems)
		}
	}
}

// checkerFor makes a checker for the imports of bs.
func checkerFor(t *testing.T, bs []block) *checker {
	t.Helper()
	paths := slices.Clone(fragmentImports)
	for _, b := range bs {
		ps, err := imports(b)
		if err != nil {
			continue // check reports it
		}
		paths = append(paths, ps...)
	}
	slices.Sort(paths)
	return newChecker(t, slices.Compact(paths))
}
