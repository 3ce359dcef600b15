package architecture_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tableFile is the document whose package table this test enforces.
const tableFile = "docs/architecture.md"

// rule is one row of the package table: what a package may import of ours.
type rule struct {
	Everything bool     // "everything": any package of ours
	Allowed    []string // package directories, slash-separated, relative to the module root
}

func (r rule) String() string {
	switch {
	case r.Everything:
		return "everything"
	case len(r.Allowed) == 0:
		return "none of ours"
	default:
		return strings.Join(r.Allowed, ", ")
	}
}

// ourImport is one import of a package of this module, found in one file.
type ourImport struct {
	File string // slash-separated path of the importing file
	Path string // the import path as written
	Dir  string // the imported package's directory relative to the module root
}

// TestArchitecture checks the code against the package table in
// docs/architecture.md: every package imports only what its row allows, every
// package directory has a row, every row names a directory that exists, and
// every row allows only packages of the rows above it.
func TestArchitecture(t *testing.T) {
	modPath := readModulePath(t)
	table, order := readTable(t)
	pkgs, _ := scanPackages(t, modPath)

	for _, msg := range checkImports(table, pkgs) {
		t.Error(msg)
	}
	for _, msg := range checkOrder(table, order) {
		t.Error(msg)
	}

	for _, dir := range sortedKeys(table) {
		info, err := os.Stat(filepath.FromSlash(dir))
		if err != nil || !info.IsDir() {
			t.Errorf("%s: the row for `%s` names no directory of the module; remove the row or create the package", tableFile, dir)
		}
	}
}

// TestPackageDocs checks that every package has a package doc comment that
// starts with "Package <name>" (any doc comment for a main package).
func TestPackageDocs(t *testing.T) {
	_, docs := scanPackages(t, readModulePath(t))
	for _, dir := range sortedKeys(docs) {
		if !docs[dir] {
			t.Errorf("%s: no package doc comment; add one starting \"Package <name>\" (for package main, any doc comment) to one of its files, such as doc.go", dir)
		}
	}
}

func TestCheckImports(t *testing.T) {
	table := map[string]rule{
		"naming":    {},
		"flow":      {Allowed: []string{"naming"}},
		"host":      {Allowed: []string{"flow", "naming"}},
		"cmd/nexus": {Everything: true},
	}
	imp := func(file, dir string) ourImport {
		return ourImport{File: file, Path: "example.com/m/" + dir, Dir: dir}
	}
	tests := []struct {
		name string
		pkgs map[string][]ourImport
		want []string
	}{
		{
			name: "AllowedImports",
			pkgs: map[string][]ourImport{
				"naming":    nil,
				"flow":      {imp("flow/compile.go", "naming")},
				"host":      {imp("host/http.go", "flow"), imp("host/http.go", "naming")},
				"cmd/nexus": {imp("cmd/nexus/main.go", "host"), imp("cmd/nexus/main.go", "flow")},
			},
		},
		{
			name: "FlowImportsHost",
			pkgs: map[string][]ourImport{
				"flow": {imp("flow/compile.go", "naming"), imp("flow/run.go", "host")},
				"host": {imp("host/http.go", "flow")},
			},
			want: []string{
				`flow/run.go imports "example.com/m/host", outside its row ` + "`flow`" + ` in docs/architecture.md (may import: naming)`,
			},
		},
		{
			name: "NoneAllowed",
			pkgs: map[string][]ourImport{
				"naming": {imp("naming/naming.go", "flow")},
			},
			want: []string{
				`naming/naming.go imports "example.com/m/flow", outside its row ` + "`naming`" + ` in docs/architecture.md (may import: none of ours)`,
			},
		},
		{
			name: "PackageMissingFromTable",
			pkgs: map[string][]ourImport{
				"util": {imp("util/util.go", "naming")},
			},
			want: []string{
				"util: package has no row in docs/architecture.md; add one (package | owns | may import) in the same change",
			},
		},
		{
			name: "SubpackageBelongsToItsRow",
			pkgs: map[string][]ourImport{
				"flow":               {imp("flow/compile.go", "flow/internal/expr")},
				"flow/internal/expr": {imp("flow/internal/expr/expr.go", "naming"), imp("flow/internal/expr/expr.go", "host")},
			},
			want: []string{
				`flow/internal/expr/expr.go imports "example.com/m/host", outside its row ` + "`flow`" + ` in docs/architecture.md (may import: naming)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkImports(table, tt.pkgs)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("checkImports() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckOrder(t *testing.T) {
	const head = "| package | owns | may import (of ours) |\n| --- | --- | --- |\n"
	for _, tt := range []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "Down",
			doc:  head + "| `naming` | x | — |\n| `flow` | x | `naming` |\n| `cmd/nexus` | x | everything |\n",
		},
		{
			name: "Up",
			doc:  head + "| `flow` | x | `naming` |\n| `naming` | x | — |\n",
			want: []string{tableFile + ": the row `flow` may import `naming`, which has no row above it: arrows point down the table (move the row, or correct the name)"},
		},
		{
			name: "Itself",
			doc:  head + "| `flow` | x | `flow` |\n",
			want: []string{tableFile + ": the row `flow` may import `flow`, which has no row above it: arrows point down the table (move the row, or correct the name)"},
		},
		{
			name: "NoRow",
			doc:  head + "| `naming` | x | — |\n| `flow` | x | `naming`, `namng` |\n",
			want: []string{tableFile + ": the row `flow` may import `namng`, which has no row above it: arrows point down the table (move the row, or correct the name)"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			table, order, err := parseRows(tt.doc)
			if err != nil {
				t.Fatalf("parseRows: %v", err)
			}
			if diff := cmp.Diff(tt.want, checkOrder(table, order)); diff != "" {
				t.Errorf("checkOrder() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckParseTable(t *testing.T) {
	const doc = "# Title\n\n" +
		"| other | table |\n| --- | --- |\n| `x` | `y` |\n\n" +
		"| package | owns | may import (of ours) |\n" +
		"| --- | --- | --- |\n" +
		"| `naming` | the name rule | — |\n" +
		"| `flow` | the language, with `backticks` and a | pipe | `naming` |\n" +
		"| `host` | the doors | `flow`, `naming` |\n" +
		"| `cmd/nexus` | wiring | everything |\n" +
		"\nAfter the table.\n"
	got, err := parseTable(doc)
	if err != nil {
		t.Fatalf("parseTable: %v", err)
	}
	want := map[string]rule{
		"naming":    {},
		"flow":      {Allowed: []string{"naming"}},
		"host":      {Allowed: []string{"flow", "naming"}},
		"cmd/nexus": {Everything: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseTable() mismatch (-want +got):\n%s", diff)
	}

	for name, bad := range map[string]string{
		"NoTable":        "# nothing here\n",
		"NoBackticks":    "| package | owns | may import (of ours) |\n| --- | --- | --- |\n| naming | x | — |\n",
		"LooseText":      "| package | owns | may import (of ours) |\n| --- | --- | --- |\n| `flow` | x | `naming` and more |\n",
		"DuplicateRow":   "| package | owns | may import (of ours) |\n| --- | --- | --- |\n| `a` | x | — |\n| `a` | y | — |\n",
		"EmptyMayImport": "| package | owns | may import (of ours) |\n| --- | --- | --- |\n| `a` | x |  |\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := parseTable(bad); err == nil {
				t.Errorf("parseTable() = %v, want an error", got)
			}
		})
	}
}

// checkImports reports every import of ours that falls outside the importing
// package's row, and every package that has no row. A package belongs to the
// row of its own directory or, failing that, of the nearest parent directory
// with a row, so flow/internal/x follows the row of flow; a package may always
// import packages of its own row.
func checkImports(table map[string]rule, pkgs map[string][]ourImport) []string {
	var msgs []string
	for _, dir := range sortedKeys(pkgs) {
		row, ok := rowOf(table, dir)
		if !ok {
			msgs = append(msgs, fmt.Sprintf("%s: package has no row in %s; add one (package | owns | may import) in the same change", dir, tableFile))
			continue
		}
		r := table[row]
		for _, imp := range pkgs[dir] {
			if r.Everything {
				continue
			}
			target, ok := rowOf(table, imp.Dir)
			if ok && (target == row || slices.Contains(r.Allowed, target)) {
				continue
			}
			msgs = append(msgs, fmt.Sprintf("%s imports %q, outside its row `%s` in %s (may import: %s)", imp.File, imp.Path, row, tableFile, r))
		}
	}
	return msgs
}

// checkOrder reports every package a row allows that has no row above it
// (order is the rows' packages, top first): the arrows of the table point
// down it, so that no package imports, even through others, one that
// imports it; and a name with no row at all (a misspelt one) allows
// nothing.
func checkOrder(table map[string]rule, order []string) []string {
	var msgs []string
	for i, pkg := range order {
		for _, a := range table[pkg].Allowed {
			if !slices.Contains(order[:i], a) {
				msgs = append(msgs, fmt.Sprintf("%s: the row `%s` may import `%s`, which has no row above it: arrows point down the table (move the row, or correct the name)", tableFile, pkg, a))
			}
		}
	}
	return msgs
}

// rowOf returns the row of the table that dir belongs to: dir itself or its
// nearest parent directory that has a row.
func rowOf(table map[string]rule, dir string) (string, bool) {
	for d := dir; d != "." && d != "/" && d != ""; d = path.Dir(d) {
		if _, ok := table[d]; ok {
			return d, true
		}
	}
	return "", false
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseTable reads the package table (the Markdown table whose header starts
// with "| package |") from an architecture document.
func parseTable(doc string) (map[string]rule, error) {
	table, _, err := parseRows(doc)
	return table, err
}

// parseRows is parseTable, with the packages in the order of their rows.
func parseRows(doc string) (map[string]rule, []string, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "| package |") {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, nil, fmt.Errorf("no table whose header starts with %q", "| package |")
	}

	table := make(map[string]rule)
	var order []string
	// Skip the header and the --- separator line below it.
	for i := start + 2; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "|") {
			break
		}
		lineNo := i + 1
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			return nil, nil, fmt.Errorf("line %d: want at least 3 cells (package | owns | may import), got %d", lineNo, len(cells))
		}
		pkgCell := strings.TrimSpace(cells[0])
		m := backticked.FindStringSubmatch(pkgCell)
		if m == nil || m[0] != pkgCell {
			return nil, nil, fmt.Errorf("line %d: the package cell %q must be one name in backticks", lineNo, pkgCell)
		}
		pkg := m[1]
		if _, dup := table[pkg]; dup {
			return nil, nil, fmt.Errorf("line %d: second row for `%s`", lineNo, pkg)
		}

		var r rule
		switch mayCell := strings.TrimSpace(cells[len(cells)-1]); mayCell {
		case "—":
		case "everything":
			r.Everything = true
		default:
			rest := mayCell
			for _, m := range backticked.FindAllStringSubmatch(mayCell, -1) {
				r.Allowed = append(r.Allowed, m[1])
				rest = strings.Replace(rest, m[0], "", 1)
			}
			if len(r.Allowed) == 0 || strings.Trim(rest, ", ") != "" {
				return nil, nil, fmt.Errorf("line %d: the may-import cell %q must be \"—\", \"everything\" or package names in backticks separated by commas", lineNo, mayCell)
			}
			slices.Sort(r.Allowed)
		}
		table[pkg] = r
		order = append(order, pkg)
	}
	if len(table) == 0 {
		return nil, nil, fmt.Errorf("the package table has no rows")
	}
	return table, order, nil
}

// readTable reads the package table of tableFile, and the packages in the
// order of their rows.
func readTable(t *testing.T) (map[string]rule, []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.FromSlash(tableFile))
	if err != nil {
		t.Fatalf("reading the package table: %v", err)
	}
	table, order, err := parseRows(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", tableFile, err)
	}
	return table, order
}

// readModulePath returns the module path declared in go.mod.
func readModulePath(t *testing.T) string {
	t.Helper()
	f, err := os.Open("go.mod")
	if err != nil {
		t.Fatalf("reading the module path: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			mod := fields[1]
			if unq, err := strconv.Unquote(mod); err == nil {
				mod = unq
			}
			return mod
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading go.mod: %v", err)
	}
	t.Fatal("go.mod: no module line")
	return ""
}

// scanPackages walks the module and returns, for every directory holding .go
// files, the imports of ours in its non-test files, and, for every directory
// holding non-test .go files, whether it has a proper package doc comment.
// The module root is left out unless it holds non-test files: this test is
// the only file there.
func scanPackages(t *testing.T, modPath string) (pkgs map[string][]ourImport, docs map[string]bool) {
	t.Helper()
	pkgs = make(map[string][]ourImport)
	docs = make(map[string]bool)
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != "." {
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return fs.SkipDir // another module
			}
		}

		entries, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(p)
		var goFiles, testFiles int
		var imports []ourImport
		hasDoc := false
		for _, e := range entries {
			fname := e.Name()
			if e.IsDir() || !strings.HasSuffix(fname, ".go") {
				continue
			}
			if strings.HasSuffix(fname, "_test.go") {
				testFiles++
				continue
			}
			goFiles++
			file := path.Join(dir, fname)
			f, err := parser.ParseFile(fset, filepath.Join(p, fname), nil, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			if hasPackageDoc(f) {
				hasDoc = true
			}
			for _, spec := range f.Imports {
				ip, err := strconv.Unquote(spec.Path.Value)
				if err != nil {
					t.Errorf("%s: bad import path %s", file, spec.Path.Value)
					continue
				}
				if ip != modPath && !strings.HasPrefix(ip, modPath+"/") {
					continue
				}
				rel := strings.TrimPrefix(strings.TrimPrefix(ip, modPath), "/")
				if rel == "" {
					rel = "."
				}
				imports = append(imports, ourImport{File: file, Path: ip, Dir: rel})
			}
		}
		if goFiles == 0 && (testFiles == 0 || dir == ".") {
			return nil
		}
		pkgs[dir] = imports
		if goFiles > 0 {
			docs[dir] = hasDoc
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	return pkgs, docs
}

// hasPackageDoc reports whether f carries a package doc comment that starts
// with "Package <name>"; for package main any doc comment will do.
func hasPackageDoc(f *ast.File) bool {
	if f.Doc == nil {
		return false
	}
	text := strings.TrimSpace(f.Doc.Text())
	if f.Name.Name == "main" {
		return text != ""
	}
	prefix := "Package " + f.Name.Name
	rest, ok := strings.CutPrefix(text, prefix)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\n')
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
