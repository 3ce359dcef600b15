package engine_test

import (
	"strings"
	"testing"

	"github.com/nexushq/nexus/engine"
)

// A response_status rendered from the message is quoted in the error, the
// journal row and the log line when it is not a status code: cut, as every
// other error cuts what a message sent (a 1 MiB number or string made a
// 1 MB journal row and log line).
func TestResponseStatusErrorIsShort(t *testing.T) {
	f := compile(t, flowSource("status-text", "", `
## Step: answer
response_status: "{{ $.code }}"
~~~ntd
{"code": {{ $.code }}}
~~~
`))
	e := engine.New(engine.Config{})
	for _, code := range []string{`0.` + strings.Repeat("7", 100000), `"` + strings.Repeat("7", 100000) + `"`} {
		res := run(t, e, f, `{"code":`+code+`}`)
		if res.Err == nil {
			t.Fatalf("%.20s…: no error", code)
		}
		if n := len(res.Err.Error()); n > 1024 {
			t.Errorf("%.20s…: the error is %d bytes", code, n)
		}
	}
}
