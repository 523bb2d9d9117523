package debugbundle

import (
	"regexp"
)

// Redacted replaces every token-like value in what the bundle writes.
const Redacted = "REDACTED"

// secretKey matches the names of fields and flags whose value is a credential: tokens of every
// kind (token, id-token, refresh-token, a service account's token, an annotation named
// example.com/token), passwords, and a kubeconfig's client key.
const secretKey = `[A-Za-z0-9_./-]*(?:token|password|passwd|client-key-data|private-key)[A-Za-z0-9_./-]*`

// redactions are applied in order to everything written into the bundle.
var redactions = []struct {
	re   *regexp.Regexp
	repl string
}{
	// "Authorization: Bearer <token>", in logs and events.
	{regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9\-._~+/]+=*`), "${1}" + Redacted},
	// A JSON field: "token": "value", "example.com/token":"value".
	{regexp.MustCompile(`(?i)("` + secretKey + `"\s*:\s*")(?:[^"\\]|\\.)+(")`), "${1}" + Redacted + "${2}"},
	// A JSON field or an escaped one within a JSON string (a log line quoting a kubeconfig):
	// \"token\": \"value\".
	{regexp.MustCompile(`(?i)(\\"` + secretKey + `\\"\s*:\s*\\")(?:[^"\\]|\\[^"])+(\\")`), "${1}" + Redacted + "${2}"},
	// A YAML field or a log's key: value / key=value: token: value, --token=value, token="value".
	{regexp.MustCompile(`(?i)((?:^|[\s{,(\[])-{0,2}` + secretKey + `\s*[:=][ \t]*"?)[^\s",}\]]+`), "${1}" + Redacted},
	// A flag and its value as separate arguments: --token value.
	{regexp.MustCompile(`(?i)((?:^|[\s,\[])--[A-Za-z0-9_-]*(?:token|password)[A-Za-z0-9_-]*[ \t]+)[^\s",\]-][^\s",\]]*`), "${1}" + Redacted},
	// A container's environment variable named like a credential, as JSON:
	// {"name": "API_TOKEN", "value": "..."}; the value of one read from a Secret is not there.
	{regexp.MustCompile(`(?i)("name"\s*:\s*"[A-Za-z0-9_.-]*(?:token|password|passwd|secret|credential|api_?key|private_?key)[A-Za-z0-9_.-]*"\s*,\s*"value"\s*:\s*")(?:[^"\\]|\\.)+(")`), "${1}" + Redacted + "${2}"},
	// A JSON Web Token anywhere (service account tokens, OIDC id tokens), whatever its key.
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`), Redacted},
}

// Redact returns b with every token-like string replaced by Redacted: bearer tokens, the values
// of fields and flags named like credentials (token, password, client-key-data, in JSON, YAML
// and key=value form), the values of environment variables named like credentials, and JSON Web
// Tokens wherever they appear.
func Redact(b []byte) []byte {
	for _, r := range redactions {
		b = r.re.ReplaceAll(b, []byte(r.repl))
	}
	return b
}
