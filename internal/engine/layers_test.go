package engine

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// layers is the engine's layering (DESIGN.md "Layers"), by file: a
// function of a file may call functions of its own layer and of the layers
// below it, never of a layer above. The packages around the engine are
// layered by the compiler (the root package's API above it; pubsub, node,
// scripts and lifecycle below it); inside it, this check does the same.
// What must reach up (a hold telling the core it ended, a tracker asking
// the pool to read leases) goes through a seam: an interface or a func
// value set once, which this check does not follow, by design. A file
// matches the first pattern that fits (filepath.Match).
var layers = []struct {
	name  string
	files []string
}{
	{"calls", []string{"obtain.go"}},
	{"engine", []string{"core.go", "acquire.go", "handoff.go", "verify.go", "track*.go", "follow.go",
		"watchdog.go", "repair.go", "renew.go", "expiry.go", "timeheap.go"}},
	{"waiting", []string{"queue*.go", "withdraw.go"}},
	{"round", []string{"quorum.go", "release.go", "lease.go", "kinds.go", "fencearg.go", "acks.go", "diagnose.go", "identity.go"}},
	{"values", []string{"hold.go", "outcome.go", "state.go", "validity.go", "keys.go", "names.go",
		"config.go", "lose.go", "public.go", "report.go"}},
}

func layerOf(file string) int {
	for i, l := range layers {
		for _, pat := range l.files {
			if ok, _ := filepath.Match(pat, file); ok {
				return i
			}
		}
	}
	return -1
}

// TestLayersCallDown parses the engine package and fails on every call from a
// file to a function of a file in a layer above it, and on a file that no
// layer names.
func TestLayersCallDown(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, f := range pkgs["engine"].Files {
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("engine", fset, files, info); err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, f := range files {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		from := layerOf(name)
		if from < 0 {
			bad = append(bad, name+": in no layer (add it to layers and to DESIGN.md)")
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "engine" {
				return true
			}
			if sig, _ := fn.Type().(*types.Signature); sig != nil && sig.Recv() != nil && types.IsInterface(sig.Recv().Type()) {
				return true // a seam: the interface's contract, not one implementation
			}
			to := layerOf(filepath.Base(fset.Position(fn.Pos()).Filename))
			if to >= 0 && to < from {
				bad = append(bad, fset.Position(id.Pos()).String()+": "+layers[from].name+" calls up into "+layers[to].name+": "+fn.FullName())
			}
			return true
		})
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}
