package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"cdplane/internal/version"
)

func TestVersionCommand(t *testing.T) {
	runCases(t, map[string]cliCase{
		"one line":       {args: []string{"version"}, stdout: "cdplane " + version.Version + " (commit "},
		"the root flag":  {args: []string{"--version"}, stdout: "cdplane " + version.Version + " (commit "},
		"unknown output": {args: []string{"version", "-o", "wide"}, code: 2, stderr: `--output "wide": want one of text, json, yaml, jsonpath=TEMPLATE, jsonpath-file=FILE`},
		"yaml":           {args: []string{"version", "-o", "yaml"}, stdout: "kind: Version\n"},
		"takes no args":  {args: []string{"version", "now"}, code: 2, stderr: `unknown command "now" for "cdplane version"`},
	})
	code, stdout, stderr := run(t, "", "version", "-o", "json")
	if code != 0 {
		t.Fatalf("version -o json: exit %d: %s", code, stderr)
	}
	var got version.Info
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("version -o json printed %q: %v", stdout, err)
	}
	if got.Version != version.Version || got.Commit == "" || !strings.HasPrefix(got.GoVersion, "go") || !strings.Contains(got.Platform, "/") {
		t.Errorf("version -o json = %+v", got)
	}
}
