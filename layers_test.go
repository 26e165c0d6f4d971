package redlock

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

// layers is the package's layering (DESIGN.md "Layers"), by file: a function
// of a file may call functions of its own layer and of the layers below it,
// never of a layer above. What must reach up (a Lock telling the engine it
// ended, a tracker asking the pool to read leases) goes through a seam: an
// interface or a func value set once, which this check does not follow, by
// design. A file matches the first pattern that fits (filepath.Match).
var layers = []struct {
	name  string
	files []string
}{
	{"api", []string{"locker.go", "redlock.go", "semaphore.go", "rwlock.go", "multilock.go",
		"election.go", "election_observe.go", "fencing.go", "inspect.go", "release_owner.go", "doc.go", "client.go"}},
	{"calls", []string{"obtain.go"}},
	{"engine", []string{"core.go", "acquire.go", "handoff.go", "verify.go", "track*.go", "follow.go",
		"watchdog.go", "repair.go", "renew.go", "expiry.go", "timeheap.go"}},
	{"waiting", []string{"queue*.go", "withdraw.go"}},
	{"round", []string{"quorum.go", "release.go", "lease.go", "kinds.go", "fencearg.go", "acks.go", "diagnose.go"}},
	{"node", []string{"identity.go"}},
	{"values", []string{"lock.go", "hold.go", "outcome.go", "state.go", "validity.go", "keys.go", "names.go",
		"options.go", "retry.go", "observe.go", "errors.go", "errjoin.go", "loss.go"}},
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

// TestLayersCallDown parses the package and fails on every call from a
// file to a function of a file in a layer above it, and on a file that no
// layer names.
func TestLayersCallDown(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, f := range pkgs["redlock"].Files {
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("redlock", fset, files, info); err != nil {
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
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "redlock" {
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
