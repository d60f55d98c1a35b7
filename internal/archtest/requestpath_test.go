package archtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The request path reads top to bottom: following a request from the
// Caddy adapter's ServeHTTP, a reader enters the proxy's core and stays
// there, and rarely goes back to a file already left.
//
// The walk is a depth-first walk of the static call graph from ServeHTTP,
// in source order, over the functions the packages declare (each one
// entered once). Under the rule "request" it follows a call only when an
// argument is the request (a *http.Request) or a response writer (of any
// type): the path of r and of its answer. Under "all" it follows every
// static call (the downloads' goroutines too). It notes the file of each
// function it enters and the file it comes back to after each call, and
// counts the files and the times it arrives at a file it was in before (a
// return to a file already left). Caddy's reverseproxy.Handler.ServeHTTP
// gives 2 files and 7 returns under "request" (57 functions, 5 files and
// 26 returns under "all"); coral_proxy gave 9 files and 18 returns (30
// and 175 under "all") on 9d7c8c9, before the core moved to
// module/caddy/proxy.
//
//	go test -v -run TestRequestPath ./internal/archtest
//
// prints the walk. REQUEST_PATH_DIR, REQUEST_PATH_START and
// REQUEST_PATH_PKGS (space-separated) measure another tree instead, and
// only print: for example an older commit of this module, with
// REQUEST_PATH_START=github.com/coralcdn/coral/module/caddy.Handler.ServeHTTP
// and REQUEST_PATH_PKGS=./module/caddy.

const (
	adapterPkg   = modulePath + "/module/caddy"
	corePkg      = modulePath + "/module/caddy/proxy"
	adapterServe = adapterPkg + ".Handler.ServeHTTP"
	coreServe    = corePkg + ".Proxy.ServeHTTP"
	// maxRequestPathReturns is half of the 18 returns of the request path
	// before the split.
	maxRequestPathReturns = 9
)

func TestRequestPath(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the proxy's dependencies for their export data")
	}
	if start := os.Getenv("REQUEST_PATH_START"); start != "" {
		dir := os.Getenv("REQUEST_PATH_DIR")
		if dir == "" {
			dir = "../.."
		}
		g := loadCallGraph(t, dir, strings.Fields(os.Getenv("REQUEST_PATH_PKGS")))
		for _, rule := range []string{"request", "all"} {
			w := g.walk(t, start, rule)
			t.Logf("%s, %q: %d functions, %d files, %d returns to a file already left\n%s", start, rule, len(w.funcs), len(w.files), w.returns, w.trace)
		}
		return
	}
	g := loadCallGraph(t, "../..", []string{"./module/caddy", "./module/caddy/proxy"})
	w := g.walk(t, adapterServe, "request")
	t.Logf("%q: %d functions, %d files %v, %d returns to a file already left\n%s", "request", len(w.funcs), len(w.files), w.files, w.returns, w.trace)
	all := g.walk(t, adapterServe, "all")
	t.Logf("%q: %d functions, %d files, %d returns to a file already left", "all", len(all.funcs), len(all.files), all.returns)

	// The adapter hands the request to the core, which never calls back:
	// everything the core's entry point reaches is the core's. What the
	// adapter calls once the core has returned (the next handler, for a
	// host outside the zone) is the adapter's own.
	reached, coreDepth := false, -1
	for i, f := range w.funcs {
		d := w.depths[i]
		if coreDepth >= 0 && d <= coreDepth {
			coreDepth = -1
		}
		switch {
		case f == coreServe:
			reached, coreDepth = true, d
		case coreDepth >= 0 && !strings.HasPrefix(f, corePkg+"."):
			t.Errorf("the request path leaves the core for %s", f)
		}
	}
	if !reached {
		t.Errorf("the request path never reaches %s", coreServe)
	}
	if w.returns > maxRequestPathReturns {
		t.Errorf("the request path returns to a file it left %d times, want at most %d:\n%s", w.returns, maxRequestPathReturns, w.trace)
	}
}

// callGraph is the functions the packages declare, with what the walk
// needs of each.
type callGraph struct {
	fset  *token.FileSet
	decls map[*types.Func]*ast.FuncDecl
	info  map[*types.Func]*types.Info
	named map[string]*types.Func // by funcName
}

// loadCallGraph parses and type-checks the packages (go list patterns, in
// dir), their imports read from the export data go list builds.
func loadCallGraph(t *testing.T, dir string, patterns []string) *callGraph {
	t.Helper()
	type listed struct {
		ImportPath string
		Dir        string
		GoFiles    []string
		Export     string
		DepOnly    bool
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export,DepOnly"}, patterns...)...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	var targets []listed
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}
	g := &callGraph{fset: token.NewFileSet(), decls: map[*types.Func]*ast.FuncDecl{}, info: map[*types.Func]*types.Info{}, named: map[string]*types.Func{}}
	imp := importer.ForCompiler(g.fset, "gc", func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	for _, p := range targets {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(g.fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, g.fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		for _, f := range files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					fn := info.Defs[fd.Name].(*types.Func)
					g.decls[fn], g.info[fn] = fd, info
					g.named[funcName(fn)] = fn
				}
			}
		}
	}
	return g
}

// pathWalk is what a walk found: the functions in the order entered, the
// files in the order first entered, the returns to a file already left,
// and the walk written out.
type pathWalk struct {
	funcs, files []string
	depths       []int // depths[i]: how deep in the walk funcs[i] was entered
	returns      int
	trace        string
}

func (g *callGraph) walk(t *testing.T, start, rule string) pathWalk {
	t.Helper()
	root, ok := g.named[start]
	if !ok {
		t.Fatalf("no function %s", start)
	}
	var w pathWalk
	var trace strings.Builder
	seen, entered := map[string]bool{}, map[*types.Func]bool{}
	cur := ""
	move := func(to string, depth int) {
		if to == cur {
			return
		}
		if seen[to] {
			w.returns++
			fmt.Fprintf(&trace, "%s← %s\n", strings.Repeat("  ", depth), to)
		} else {
			w.files = append(w.files, to)
		}
		seen[to], cur = true, to
	}
	var visit func(fn *types.Func, depth int)
	visit = func(fn *types.Func, depth int) {
		entered[fn] = true
		w.funcs = append(w.funcs, funcName(fn))
		w.depths = append(w.depths, depth)
		fmt.Fprintf(&trace, "%s%s (%s)\n", strings.Repeat("  ", depth), funcName(fn), g.file(fn))
		info := g.info[fn]
		ast.Inspect(g.decls[fn].Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			callee := staticCallee(info, call)
			if callee == nil {
				return true
			}
			// The declaration, which for a function of another of the
			// packages is another object than the one imported.
			callee = g.named[funcName(callee)]
			if callee == nil || entered[callee] || rule == "request" && !passesRequest(info, call) {
				return true
			}
			move(g.file(callee), depth+1)
			visit(callee, depth+1)
			move(g.file(fn), depth)
			return true
		})
	}
	move(g.file(root), 0)
	visit(root, 0)
	w.trace = trace.String()
	return w
}

// file is the file that declares fn, relative to the module's root.
func (g *callGraph) file(fn *types.Func) string {
	name := g.fset.Position(g.decls[fn].Pos()).Filename
	if i := strings.Index(name, "/module/"); i >= 0 {
		return name[i+1:]
	}
	return filepath.Base(name)
}

// staticCallee is the function or concrete method call calls, or nil (a
// call of a function value or through an interface).
func staticCallee(info *types.Info, call *ast.CallExpr) *types.Func {
	fun := ast.Unparen(call.Fun)
	if ix, ok := fun.(*ast.IndexExpr); ok { // an explicit instantiation
		fun = ix.X
	}
	var id *ast.Ident
	switch f := fun.(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok {
		return nil
	}
	if recv := fn.Signature().Recv(); recv != nil && types.IsInterface(recv.Type()) {
		return nil
	}
	return fn.Origin()
}

// passesRequest reports whether an argument of call is a request or a
// response writer (of any type that is one: the proxy wraps the server's).
func passesRequest(info *types.Info, call *ast.CallExpr) bool {
	for _, a := range call.Args {
		if t := info.TypeOf(a); isNetHTTP(t, "Request", true) || isResponseWriter(t) {
			return true
		}
	}
	return false
}

// isResponseWriter reports whether t has the methods of an
// http.ResponseWriter.
func isResponseWriter(t types.Type) bool {
	if t == nil {
		return false
	}
	for _, name := range []string{"Header", "Write", "WriteHeader"} {
		obj, _, _ := types.LookupFieldOrMethod(t, true, nil, name)
		if _, ok := obj.(*types.Func); !ok {
			return false
		}
	}
	return true
}

// isNetHTTP reports whether t is net/http's type name (a pointer to it,
// with pointer).
func isNetHTTP(t types.Type, name string, pointer bool) bool {
	if pointer {
		p, ok := t.(*types.Pointer)
		if !ok {
			return false
		}
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "net/http" && n.Obj().Name() == name
}

// funcName is "import/path.Func" or "import/path.Type.Method".
func funcName(fn *types.Func) string {
	if recv := fn.Signature().Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			return fn.Pkg().Path() + "." + n.Obj().Name() + "." + fn.Name()
		}
	}
	return fn.Pkg().Path() + "." + fn.Name()
}
