package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCronZoneIsTheEmbeddedDatabase: "Zones come from the tz database
// embedded in the binary, so a flow compiles the same on every host"
// (docs/decisions.md). A zone only the host's own tz files (ZONEINFO, or
// /usr/share/zoneinfo) hold must be refused as it is on a host without
// them: otherwise a flow published on one host is a corrupt artifact, and
// a cron flow that never ticks, on the next.
func TestCronZoneIsTheEmbeddedDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zi := filepath.Join(dir, "zoneinfo", "Mars")
	if err := os.MkdirAll(zi, 0o755); err != nil {
		t.Fatal(err)
	}
	// any valid TZif file will do: a minimal one for UTC
	if err := os.WriteFile(filepath.Join(zi, "Olympus"), tzifUTC, 0o644); err != nil {
		t.Fatal(err)
	}
	flowFile := cronFlowFor("mars", "@every 2s", "http://127.0.0.1:1", "schedule_timezone: Mars/Olympus\n")
	writeFiles(t, dir, map[string]string{"mars.md": flowFile})
	for _, env := range [][]string{nil, {"ZONEINFO=" + filepath.Join(dir, "zoneinfo")}} {
		cmd := nexusCmd(dir, "validate", "mars.md")
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err == nil || !strings.Contains(out.String(), `schedule_timezone "Mars/Olympus" is not an IANA time zone`) {
			t.Errorf("env %v: nexus validate accepted a zone the binary's database does not hold (err %v):\n%s", env, err, out.String())
		}
	}
}

// tzifUTC is a minimal TZif (version 1) file: no transitions, one type,
// UTC, abbreviation "UTC".
var tzifUTC = func() []byte {
	b := []byte("TZif")
	b = append(b, 0)                     // version 1
	b = append(b, make([]byte, 15)...)   // reserved
	counts := []uint32{0, 0, 0, 0, 1, 4} // isutcnt isstdcnt leapcnt timecnt typecnt charcnt
	for _, c := range counts {
		b = append(b, byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
	}
	b = append(b, 0, 0, 0, 0, 0, 0) // ttinfo: utoff 0, isdst 0, abbrind 0
	b = append(b, 'U', 'T', 'C', 0)
	return b
}()
