package host

import (
	"errors"
	"html/template"
	"reflect"
	"slices"
	"strings"
)

// Route is one method and path pattern a Server's routers answer.
type Route struct{ Method, Path string }

// Routes lists every route of s's routers (the main one and the UI's),
// read from httprouter's trees, so that a test covers a route as soon as
// it is added. httprouter has no listing of its own: its unexported
// fields are read by reflection, and a change of their shape fails here.
func Routes(s *Server) []Route {
	var out []Route
	for _, r := range []any{s.router, s.ui} {
		v := reflect.ValueOf(r)
		if v.IsNil() {
			continue
		}
		trees := v.Elem().FieldByName("trees")
		if !trees.IsValid() {
			panic("httprouter.Router has no trees field")
		}
		for _, m := range trees.MapKeys() {
			walkRoutes(trees.MapIndex(m).Elem(), m.String(), "", &out)
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method)
	})
	return out
}

func walkRoutes(n reflect.Value, method, prefix string, out *[]Route) {
	p, handle, children := n.FieldByName("path"), n.FieldByName("handle"), n.FieldByName("children")
	if !p.IsValid() || !handle.IsValid() || !children.IsValid() {
		panic("httprouter's node has no path, handle or children field")
	}
	full := prefix + p.String()
	if !handle.IsNil() {
		*out = append(*out, Route{method, full})
	}
	for i := range children.Len() {
		walkRoutes(children.Index(i).Elem(), method, full, out)
	}
}

// BreakPage makes s's page template name fail as it executes, after
// writing part of its page: a template's failure cannot be caused from a
// request.
func BreakPage(s *Server, name string) {
	t := s.pages
	if t == uiTemplates {
		t = template.Must(parsePages()) // the shared set, which may have executed, cannot be cloned
	}
	template.Must(t.New(name).Funcs(template.FuncMap{
		"fail": func() (string, error) { return "", errors.New("the template is broken") },
	}).Parse(`{{template "head" .}}half a page{{fail}}`))
	s.pages = t
}
