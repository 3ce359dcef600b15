package flow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// RenderKey says whether a hole produced the key: a key whose holes all
// rendered blank is the template's literal text alone, which every such
// message would share.
func TestTemplateRenderKey(t *testing.T) {
	t.Parallel()
	type result struct {
		Key    string
		Filled bool
	}
	tests := []struct {
		name string
		src  string
		want result
	}{
		{"hole only", `{{ $.id }}`, result{"7", true}},
		{"hole only, missing", `{{ $.missing }}`, result{"", false}},
		{"literal around a missing hole", `order-{{ $.missing }}`, result{"order-", false}},
		{"literal around a null hole", `order-{{ $.nul }}-x`, result{"order--x", false}},
		{"literal around a blank hole", `order-{{ "  " }}`, result{"order-  ", false}},
		{"literal around a value", `order-{{ $.id }}`, result{"order-7", true}},
		{"one of two holes", `{{ $.missing }}/{{ $.k1 }}`, result{"/x", true}},
		{"false is text", `order-{{ $.ok && false }}`, result{"order-false", true}},
		{"zero is text", `n{{ $.count - 3 }}`, result{"n0", true}},
		{"empty array is text", `a{{ [] }}`, result{"a[]", true}},
	}
	env := &Env{Doc: templateDoc(), Ctx: exprCtx()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := CompileTemplate(tt.src)
			if err != nil {
				t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
			}
			key, filled, err := tmpl.RenderKey(env)
			if err != nil {
				t.Fatalf("RenderKey(%q): %v", tt.src, err)
			}
			if diff := cmp.Diff(tt.want, result{key, filled}); diff != "" {
				t.Errorf("RenderKey(%q) (-want +got):\n%s", tt.src, diff)
			}
			if text, _ := tmpl.Render(env); text != key {
				t.Errorf("RenderKey(%q) = %q, Render = %q: the key is the rendered text", tt.src, key, text)
			}
		})
	}
}

func TestTemplateRenderKeyError(t *testing.T) {
	t.Parallel()
	tmpl, err := CompileTemplate(`order-{{ $.missing + 1 }}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tmpl.RenderKey(&Env{Doc: templateDoc()}); err == nil {
		t.Errorf("RenderKey of a hole that fails: no error")
	}
}
