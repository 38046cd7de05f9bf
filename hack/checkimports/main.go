package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the checkout to check")
	self := flag.Bool("selftest", false, "check that a copy of the checkout with one violation of each kind fails")
	flag.Parse()
	if *self {
		if err := selftest(*root, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "checkimports -selftest:", err)
			os.Exit(1)
		}
		return
	}
	vs, err := check(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkimports:", err)
		os.Exit(2)
	}
	for _, v := range vs {
		fmt.Fprintln(os.Stderr, "check-imports:", v)
	}
	if len(vs) > 0 {
		os.Exit(1)
	}
	fmt.Println("check-imports: ok")
}

// pkg is one entry of go list -json.
type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Dir        string
	Standard   bool
	ForTest    string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

// graph is the module's import graph, test variants included.
type graph struct {
	mod  string
	pkgs map[string]*pkg // by import path as go list names it ("p [p.test]" for variants)
}

// base strips go list's test-variant suffix: "p [p.test]" is p.
func base(path string) string {
	if i := strings.Index(path, " ["); i >= 0 {
		return path[:i]
	}
	return path
}

func load(root string) (*graph, error) {
	mod, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-test", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	g := &graph{mod: mod, pkgs: map[string]*pkg{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		g.pkgs[p.ImportPath] = &p
	}
	return g, nil
}

func modulePath(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", f.Name())
}

// own says whether p is one of the module's packages (not a test main).
func (g *graph) own(p *pkg) bool {
	path := base(p.ImportPath)
	return (path == g.mod || strings.HasPrefix(path, g.mod+"/")) && !strings.HasSuffix(path, ".test")
}

// rx compiles a wall's pattern with "@" as the module path.
func (g *graph) rx(pattern string) *regexp.Regexp {
	if pattern == "" {
		return nil
	}
	return regexp.MustCompile(strings.ReplaceAll(pattern, "@", regexp.QuoteMeta(g.mod)))
}

// matches says whether the wall's pkg names path.
func (g *graph) matches(w wall, path string) bool {
	if tree, ok := strings.CutSuffix(w.pkg, "/..."); ok {
		return path == g.mod+"/"+tree || strings.HasPrefix(path, g.mod+"/"+tree+"/")
	}
	return path == g.mod+"/"+w.pkg
}

// isTest says whether p is a test variant or an external test package.
func isTest(p *pkg) bool { return p.ForTest != "" || strings.HasSuffix(p.Name, "_test") }

func check(root string) ([]string, error) {
	g, err := load(root)
	if err != nil {
		return nil, err
	}
	var vs []string
	vs = append(vs, g.checkWalls()...)
	vs = append(vs, g.checkDocs()...)
	tags, err := checkBuildTags(root)
	if err != nil {
		return nil, err
	}
	vs = append(vs, tags...)
	return vs, nil
}

func (g *graph) checkWalls() []string {
	var vs []string
	seen := map[string]bool{}
	add := func(v string) {
		if !seen[v] {
			seen[v] = true
			vs = append(vs, v)
		}
	}
	for _, w := range walls {
		forbid, allow := g.rx(w.forbid), g.rx(w.allow)
		importers, testImporters := g.rx(w.importers), g.rx(w.testImporters)
		found := false
		for _, p := range g.pkgs {
			if !g.own(p) || !g.matches(w, base(p.ImportPath)) {
				continue
			}
			if !isTest(p) {
				found = true
			}
			if forbid == nil || (isTest(p) && !w.tests) {
				continue
			}
			self := base(p.ImportPath)
			list := p.Deps
			if w.direct {
				list = p.Imports
			}
			for _, dep := range list {
				d := base(dep)
				if d == self || strings.HasPrefix(d, self+"/") || !forbid.MatchString(d) || (allow != nil && allow.MatchString(d)) {
					continue
				}
				if dp := g.pkgs[dep]; dp != nil && dp.Standard || isStd(d) {
					continue // the standard library is never a wall's business
				}
				if g.matches(w, d) {
					continue
				}
				what := "production code"
				if isTest(p) {
					what = "its tests"
				}
				add(fmt.Sprintf("%s must not depend on %s (%s; imported by %s) — %s", self, d, what, g.importersOf(p, dep), w.doc))
			}
		}
		if !found {
			add(fmt.Sprintf("walls.go: the wall %q names no package: remove or fix it", w.pkg))
		}
		if importers == nil && testImporters == nil {
			continue
		}
		for _, p := range g.pkgs {
			if !g.own(p) {
				continue
			}
			from := base(p.ImportPath)
			if g.matches(w, from) {
				continue // the package itself and its tests
			}
			for _, imp := range p.Imports {
				if !g.matches(w, base(imp)) {
					continue
				}
				ok := importers != nil && importers.MatchString(from)
				if isTest(p) {
					ok = ok || (testImporters != nil && testImporters.MatchString(from))
				}
				if !ok {
					what := "production code"
					if isTest(p) {
						what = "a test"
					}
					add(fmt.Sprintf("%s must not import %s (%s) — %s", from, base(imp), what, w.doc))
				}
			}
		}
	}
	sort.Strings(vs)
	return vs
}

// isStd: a path without a dot in its first element is the standard library's.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// importersOf lists the packages in p's graph that import dep directly.
func (g *graph) importersOf(p *pkg, dep string) string {
	var out []string
	for _, d := range append([]string{p.ImportPath}, p.Deps...) {
		q := g.pkgs[d]
		if q == nil {
			continue
		}
		for _, imp := range q.Imports {
			if imp == dep {
				out = append(out, base(q.ImportPath))
				break
			}
		}
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("and %d more", len(out)-3))
	}
	return strings.Join(out, ", ")
}

func (g *graph) checkDocs() []string {
	var vs []string
	for _, p := range g.pkgs {
		if !g.own(p) || isTest(p) || p.Error != nil {
			continue
		}
		if p.Doc == "" {
			vs = append(vs, fmt.Sprintf("%s has no package doc comment (add a doc.go saying what it is for)", p.ImportPath))
			continue
		}
		vs = append(vs, docNamesFiles(p.ImportPath, p.Dir)...)
	}
	sort.Strings(vs)
	return vs
}

// docNamesFiles: a package of more than one file keeps its doc comment in
// doc.go, and that comment names every other non-test file of the
// directory, whatever its build tags or generator, so a reader finds each
// file's job in one place. A one-file package's doc may sit on its file;
// where it has a doc.go, that names the file.
func docNamesFiles(path, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && n != "doc.go" {
			files = append(files, n)
		}
	}
	_, err = os.Stat(filepath.Join(dir, "doc.go"))
	if len(files) < 2 && os.IsNotExist(err) {
		return nil
	}
	if os.IsNotExist(err) {
		return []string{fmt.Sprintf("%s has %d files and no doc.go (its package doc names each file's job)", path, len(files))}
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return []string{fmt.Sprintf("%s/doc.go: %v", path, err)}
	}
	if f.Doc == nil {
		return []string{fmt.Sprintf("%s: the package doc comment is not in doc.go", path)}
	}
	text := f.Doc.Text()
	var vs []string
	for _, n := range files {
		if !namesFile(text, n) {
			vs = append(vs, fmt.Sprintf("%s/doc.go does not name %s (say its job in the package doc)", path, n))
		}
	}
	return vs
}

// namesFile says whether text names the file as a word of its own
// ("cpu.go", not inside "parsecpu.go"; a full stop may follow it).
func namesFile(text, name string) bool {
	return regexp.MustCompile(`(^|[^\w.-])` + regexp.QuoteMeta(name) + `($|[^\w-])`).MatchString(text)
}

// ---- build tags

var (
	// absolute paths into sysfs or procfs.
	absolute = regexp.MustCompile(`^/(sys|proc)(/|$)`)
	// well-known paths inside sysfs and procfs, as joined onto a root.
	relative = regexp.MustCompile(`^(devices/system|devices/pci|class/(net|block|nvme)|bus/(pci|node|cpu)|fs/cgroup|kernel/(mm|irq)|` +
		`(self|thread-self|[0-9]+)/(mountinfo|cgroup|stat|status|fd)|mountinfo$|meminfo$|cpuinfo$|interrupts$|pressure/|irq/[0-9])`)
	// roots of sysfs and procfs as the code names them.
	rootName = regexp.MustCompile(`(?i)^(sys|proc)(fs)?(root|path|dir|mount|mnt)?$|^(sys|proc)(fs)?(root|path|dir|mount|mnt)$|(Sys|Proc)(Root|FS|Fs|Path|Mount)`)
	// pathLike is a literal that can be a path under a root, with a slash
	// (not a message, a flag name or help that mentions the root).
	pathLike = regexp.MustCompile(`^/?[A-Za-z0-9._:-]+(/[A-Za-z0-9._:-]*)+$`)
	libs     = regexp.MustCompile(`^github\.com/(opencontainers/cgroups|containerd/cgroups|prometheus/procfs)(/|$)`)
)

// touches says how a file reads sysfs, procfs or cgroupfs ("" if it does
// not).
func touches(fset *token.FileSet, f *ast.File) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); libs.MatchString(p) {
			return "imports " + p
		}
	}
	var why string
	ast.Inspect(f, func(n ast.Node) bool {
		if why != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(n.Value); err == nil && (absolute.MatchString(s) || relative.MatchString(s)) {
				why = fmt.Sprintf("%s: %q", fset.Position(n.Pos()), s)
			}
		case *ast.CallExpr:
			if root, lit := rootAndLiteral(n.Args); root != "" {
				why = fmt.Sprintf("%s: %s joined with %q", fset.Position(n.Pos()), root, lit)
			}
		case *ast.BinaryExpr:
			if n.Op == token.ADD {
				if root, lit := rootAndLiteral([]ast.Expr{n.X, n.Y}); root != "" {
					why = fmt.Sprintf("%s: %s + %q", fset.Position(n.Pos()), root, lit)
				}
			}
		}
		return true
	})
	return why
}

// rootAndLiteral finds, among args, a sysfs or procfs root and a path
// literal joined onto it.
func rootAndLiteral(args []ast.Expr) (string, string) {
	var root, lit string
	for _, a := range args {
		switch a := a.(type) {
		case *ast.Ident:
			if rootName.MatchString(a.Name) {
				root = a.Name
			}
		case *ast.SelectorExpr:
			if rootName.MatchString(a.Sel.Name) {
				root = a.Sel.Name
			}
		case *ast.BasicLit:
			if s, err := strconv.Unquote(a.Value); a.Kind == token.STRING && err == nil && pathLike.MatchString(s) {
				lit = s
			}
		}
	}
	if root == "" || lit == "" {
		return "", ""
	}
	return root, lit
}

// requiresLinux says whether a build constraint holds only on linux: false
// for every assignment of its tags with linux false.
func requiresLinux(expr constraint.Expr) bool {
	var tags []string
	seen := map[string]bool{}
	expr.Eval(func(tag string) bool {
		if !seen[tag] && tag != "linux" {
			seen[tag] = true
			tags = append(tags, tag)
		}
		return false
	})
	if len(tags) > 12 {
		return false
	}
	for mask := 0; mask < 1<<len(tags); mask++ {
		set := map[string]bool{}
		for i, t := range tags {
			set[t] = mask&(1<<i) != 0
		}
		if expr.Eval(func(tag string) bool { return tag != "linux" && set[tag] }) {
			return false
		}
	}
	return true
}

func checkBuildTags(root string) ([]string, error) {
	var vs []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == ".git" || name == "testdata" || name == "bin" || name == "_output" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_linux.go") || strings.HasSuffix(name, "_linux_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil // go vet reports what does not parse
		}
		why := touches(fset, f)
		if why == "" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		var expr constraint.Expr
		for _, cg := range f.Comments {
			if cg.Pos() > f.Package {
				break
			}
			for _, c := range cg.List {
				if constraint.IsGoBuild(c.Text) {
					expr, _ = constraint.Parse(c.Text)
				}
			}
		}
		if expr == nil || !requiresLinux(expr) {
			vs = append(vs, fmt.Sprintf("%s reads sysfs, procfs or cgroupfs (%s) but its build constraint does not require linux (add //go:build linux)", rel, strings.TrimPrefix(why, root+"/")))
		}
		return nil
	})
	return vs, err
}
