package cli

import "testing"

// TestAssignValidation: assign and unassign check the id, the kind and the name before they
// read a kubeconfig; a valid request gets as far as the kubeconfig ({missing}).
func TestAssignValidation(t *testing.T) {
	cases := map[string]cliCase{}
	for _, verb := range []string{"assign", "unassign"} {
		for name, tc := range map[string]cliCase{
			"invalid id":                             {args: []string{"namespace", "team-a", "--control-plane-id", "Plane-A"}, code: 2, stderr: `invalid control-plane id "Plane-A": must be lowercase`},
			"reserved id":                            {args: []string{"node", "n1", "--control-plane-id", "default"}, code: 2, stderr: `invalid control-plane id "default": "default" is reserved`},
			"no id":                                  {args: []string{"namespace", "team-a"}, code: 2, stderr: "a control-plane id is required (--control-plane-id)"},
			"an empty id":                            {args: []string{"node", "n1", "--control-plane-id="}, code: 2, stderr: "a control-plane id is required"},
			"invalid id from the env":                {args: []string{"namespace", "team-a"}, env: "plane_a", code: 2, stderr: `invalid control-plane id "plane_a"`},
			"the flag wins over env":                 {args: []string{"namespace", "team-a", "--control-plane-id", "Plane-A"}, env: "plane-a", code: 2, stderr: `invalid control-plane id "Plane-A"`},
			"no name":                                {args: []string{"namespace", "--control-plane-id", "plane-a"}, code: 2, stderr: "want exactly one namespace name, got 0 arguments (usage: cdplane " + verb + " namespace NAME --control-plane-id ID [flags])"},
			"two namespaces":                         {args: []string{"namespace", "a", "b", "--control-plane-id", "plane-a"}, code: 2, stderr: "want exactly one namespace name, got 2 arguments"},
			"no node":                                {args: []string{"node", "--control-plane-id", "plane-a"}, code: 2, stderr: "want at least one node name, or -l SELECTOR"},
			"names and a selector":                   {args: []string{"node", "n1", "-l", "a=b", "--control-plane-id", "plane-a"}, code: 2, stderr: "name nodes or select them with -l, not both"},
			"a bad selector":                         {args: []string{"node", "-l", "a==b==c", "--control-plane-id", "plane-a"}, code: 2, stderr: `-l "a==b==c": `},
			"one bad name of two":                    {args: []string{"node", "n1", "n1/../x", "--control-plane-id", "plane-a"}, code: 2, stderr: `invalid node name "n1/../x"`},
			"two nodes":                              {args: []string{"node", "n1", "n2", "--control-plane-id", "plane-a", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"nodes by selector":                      {args: []string{"node", "-l", "rack=1", "--control-plane-id", "plane-a", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"a context":                              {args: []string{"node", "n1", "--control-plane-id", "plane-a", "--context", "other", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"an empty name":                          {args: []string{"node", "", "--control-plane-id", "plane-a"}, code: 2, stderr: "a node name is required"},
			"invalid namespace name":                 {args: []string{"namespace", "Team-A", "--control-plane-id", "plane-a"}, code: 2, stderr: `invalid namespace name "Team-A": a lowercase RFC 1123 label`},
			"a namespace with a dot":                 {args: []string{"namespace", "team.a", "--control-plane-id", "plane-a"}, code: 2, stderr: `invalid namespace name "team.a"`},
			"invalid node name":                      {args: []string{"node", "n1/../x", "--control-plane-id", "plane-a"}, code: 2, stderr: `invalid node name "n1/../x"`},
			"the plane's own namespace":              {args: []string{"namespace", "plane-a-cdplane", "--control-plane-id", "plane-a"}, code: 3, stderr: verb + ` refused: namespace plane-a-cdplane: it is control plane "plane-a"'s driver namespace`},
			"unknown flag":                           {args: []string{"node", "n1", "--control-plane-id", "plane-a", "--forse"}, code: 2, stderr: "unknown flag: --forse"},
			"unknown kind":                           {args: []string{"pod", "p"}, code: 2, stderr: `unknown command "pod" for "cdplane ` + verb + `"`},
			"valid namespace":                        {args: []string{"namespace", "team-a", "--control-plane-id", "plane-a", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"valid node, id from env":                {args: []string{"node", "gpu-1.rack-2", "--kubeconfig", "{missing}"}, env: "plane-a", code: 1, stderr: reachedCluster},
			"a node named like the driver namespace": {args: []string{"node", "plane-a-cdplane", "--control-plane-id", "plane-a", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		} {
			tc.args = append([]string{verb}, tc.args...)
			cases[verb+": "+name] = tc
		}
	}
	cases["assign: --force is unassign's"] = cliCase{args: []string{"assign", "node", "n1", "--control-plane-id", "plane-a", "--force"}, code: 2, stderr: "unknown flag: --force"}
	cases["unassign: --force"] = cliCase{args: []string{"unassign", "node", "n1", "--control-plane-id", "plane-a", "--force", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster}
	cases["unassign: --force does not skip validation"] = cliCase{args: []string{"unassign", "node", "n1", "--force"}, code: 2, stderr: "a control-plane id is required"}
	cases["assign: a bad --timeout"] = cliCase{args: []string{"assign", "node", "n1", "--control-plane-id", "plane-a", "--timeout", "0s"}, code: 2, stderr: "--timeout must be positive, got 0s"}
	cases["assign node --check: a bad --timeout"] = cliCase{args: []string{"assign", "node", "--check", "--timeout", "-1s"}, code: 2, stderr: "--timeout must be positive"}
	cases["assign node --check: no name"] = cliCase{args: []string{"assign", "node", "n1", "--check"}, code: 2, stderr: "--check takes no node name or selector, got 1 arguments"}
	cases["assign namespace: no -l"] = cliCase{args: []string{"assign", "namespace", "-l", "a=b"}, code: 2, stderr: "unknown shorthand flag: 'l'"}
	cases["assign node --check: invalid id"] = cliCase{args: []string{"assign", "node", "--check", "--control-plane-id", "Plane-A"}, code: 2, stderr: `invalid control-plane id "Plane-A"`}
	cases["assign node --check: every plane"] = cliCase{args: []string{"assign", "node", "--check", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster}
	cases["assign namespace: no --check"] = cliCase{args: []string{"assign", "namespace", "--check"}, code: 2, stderr: "unknown flag: --check"}
	cases["unassign node: no --check"] = cliCase{args: []string{"unassign", "node", "--check"}, code: 2, stderr: "unknown flag: --check"}
	runCases(t, cases)
}
