package debugbundle

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"

func TestRedact(t *testing.T) {
	cases := map[string]struct {
		in, want string
	}{
		"bearer header in a log": {
			in:   `I1207 request headers: Authorization: Bearer abc.DEF-123_x==`,
			want: `I1207 request headers: Authorization: Bearer REDACTED`,
		},
		"kubeconfig token field": {
			in:   "users:\n- name: admin\n  user:\n    token: s3cr3t-value\n",
			want: "users:\n- name: admin\n  user:\n    token: REDACTED\n",
		},
		"kubeconfig client key and password": {
			in:   "    client-key-data: LS0tLS1CRUdJTg==\n    password: hunter2\n",
			want: "    client-key-data: REDACTED\n    password: REDACTED\n",
		},
		"JSON annotation named like a token": {
			in:   `{"annotations":{"example.com/token":"abc\"def","other":"kept"}}`,
			want: `{"annotations":{"example.com/token":"REDACTED","other":"kept"}}`,
		},
		"indented JSON id-token": {
			in:   "{\n  \"id-token\": \"xyz\",\n  \"name\": \"n\"\n}",
			want: "{\n  \"id-token\": \"REDACTED\",\n  \"name\": \"n\"\n}",
		},
		"escaped JSON within a log line": {
			in:   `msg="config" body="{\"token\":\"abc\"}"`,
			want: `msg="config" body="{\"token\":\"REDACTED\"}"`,
		},
		"flag": {
			in:   "args: [--token=abc, --v=2] --password secret",
			want: "args: [--token=REDACTED, --v=2] --password REDACTED",
		},
		"environment variable named like a credential": {
			in:   "{\n  \"name\": \"REGISTRY_PASSWORD\",\n  \"value\": \"pw\"\n}, {\"name\":\"NODE_NAME\",\"value\":\"n1\"}",
			want: "{\n  \"name\": \"REGISTRY_PASSWORD\",\n  \"value\": \"REDACTED\"\n}, {\"name\":\"NODE_NAME\",\"value\":\"n1\"}",
		},
		"JWT under any key": {
			in:   `{"note":"` + jwt + `"}`,
			want: `{"note":"REDACTED"}`,
		},
		"service account token file in a log": {
			in:   "read /var/run/secrets/kubernetes.io/serviceaccount/token: " + jwt,
			want: "read /var/run/secrets/kubernetes.io/serviceaccount/token: REDACTED",
		},
		"nothing token-like is kept": {
			in:   `{"name":"train","status":"Ready","tokenRequests":null,"numNodes":4} resource.nvidia.com/computeDomain=1234`,
			want: `{"name":"train","status":"Ready","tokenRequests":null,"numNodes":4} resource.nvidia.com/computeDomain=1234`,
		},
		"empty token value stays empty": {
			in:   `{"token":""}`,
			want: `{"token":""}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := string(Redact([]byte(tc.in)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Redact(%q) (-want +got):\n%s", tc.in, diff)
			}
			if strings.Contains(got, "s3cr3t") || strings.Contains(got, jwt) {
				t.Errorf("secret left in %q", got)
			}
		})
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{`token: a`, `"token":"\"`, `Bearer `, "eyJ.a.b", `\"token\":\"x\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Redact([]byte(s))
		if again := Redact(out); string(again) != string(out) {
			t.Errorf("Redact is not idempotent on %q: %q then %q", s, out, again)
		}
	})
}
