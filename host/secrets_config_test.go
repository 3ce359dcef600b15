package host_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nexushq/nexus/host"
)

// An empty or blank secret would make signatures anyone can forge: New
// refuses it (nexus serve refuses a blank part of --secret before).
func TestNewRefusesAnEmptySecret(t *testing.T) {
	for _, secrets := range [][]string{{""}, {"s3cret", " "}, {"\t\n"}} {
		t.Run(fmt.Sprintf("%q", secrets), func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "Config.Secrets[") || !strings.Contains(msg, "is empty") {
					t.Errorf("New(%q) panicked with %q, want it to name the empty secret", secrets, msg)
				}
			}()
			host.New(host.Config{Secrets: secrets})
		})
	}
	// secrets that are set are taken
	if s := host.New(host.Config{Secrets: []string{"s3cret", "old-s3cret"}}); s == nil {
		t.Fatal("New returned nil")
	}
}
