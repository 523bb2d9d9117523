package cli

import (
	"strings"
	"testing"
)

// TestDeployValidation: install and apply check the id, the values and the common flags before
// they read a kubeconfig; valid ones get as far as the kubeconfig ({missing}).
func TestDeployValidation(t *testing.T) {
	cases := map[string]cliCase{}
	for _, verb := range []string{"install", "apply"} {
		for name, tc := range map[string]cliCase{
			"plane: invalid id":           {args: []string{"plane", "--control-plane-id", "Plane-A"}, code: 2, stderr: `invalid control-plane id "Plane-A": must be lowercase`},
			"plane: too long":             {args: []string{"plane", "--control-plane-id", "a23456789012345678901"}, code: 2, stderr: `invalid control-plane id "a23456789012345678901": must be at most 20 characters, has 21`},
			"plane: reserved":             {args: []string{"plane", "--control-plane-id", "default"}, code: 2, stderr: `invalid control-plane id "default": "default" is reserved`},
			"plane: invalid id from env":  {args: []string{"plane"}, env: "Plane-A", code: 2, stderr: `invalid control-plane id "Plane-A"`},
			"plane: id before values":     {args: []string{"plane", "--control-plane-id", "Plane-A", "-f", "{missing}"}, code: 2, stderr: `invalid control-plane id "Plane-A"`},
			"plane: an argument":          {args: []string{"plane", "plane-a"}, code: 2, stderr: `unknown command "plane-a" for "cdplane ` + verb + ` plane"`},
			"plane: contradicting value":  {args: []string{"plane", "--control-plane-id", "plane-a", "--set", "controlPlaneID=plane-b"}, code: 2, stderr: `value controlPlaneID=plane-b contradicts --control-plane-id="plane-a"`},
			"plane: value out of schema":  {args: []string{"plane", "--control-plane-id", "plane-a", "--set", "logVerbosity=11"}, code: 2, stderr: "values of chart cdplane"},
			"plane: malformed --set":      {args: []string{"plane", "--control-plane-id", "plane-a", "--set", "logVerbosity"}, code: 2, stderr: "--set logVerbosity:"},
			"plane: missing values file":  {args: []string{"plane", "--control-plane-id", "plane-a", "-f", "{missing}"}, code: 2, stderr: "--values: open "},
			"plane: values not YAML":      {args: []string{"plane", "--control-plane-id", "plane-a", "--values", "{bad-values}"}, code: 2, stderr: "--values "},
			"plane: zero timeout":         {args: []string{"plane", "--control-plane-id", "plane-a", "--timeout", "0s"}, code: 2, stderr: "--timeout must be positive, got 0s"},
			"plane: bad timeout":          {args: []string{"plane", "--control-plane-id", "plane-a", "--timeout", "soon"}, code: 2, stderr: `invalid argument "soon" for "--timeout"`},
			"plane: unknown flag":         {args: []string{"plane", "--control-plane-id", "plane-a", "--delete-domains"}, code: 2, stderr: "unknown flag: --delete-domains"},
			"plane: valid":                {args: []string{"plane", "--control-plane-id", "plane-a", "-f", "{values}", "--set", "logVerbosity=3", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"plane: the legacy plane":     {args: []string{"plane", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"plane: id from env":          {args: []string{"plane", "--kubeconfig", "{missing}"}, env: "plane-a", code: 1, stderr: reachedCluster},
			"prerequisites: unknown key":  {args: []string{"prerequisites", "--set", "frobnicate=true"}, code: 2, stderr: "values of chart cdplane-prerequisites"},
			"prerequisites: bad value":    {args: []string{"prerequisites", "--set", "adminGroups={a\\,b}"}, code: 2, stderr: "values of chart cdplane-prerequisites"},
			"prerequisites: takes no id":  {args: []string{"prerequisites", "--control-plane-id", "plane-a"}, code: 2, stderr: "unknown flag: --control-plane-id"},
			"prerequisites: an argument":  {args: []string{"prerequisites", "now"}, code: 2, stderr: `unknown command "now" for "cdplane ` + verb + ` prerequisites"`},
			"prerequisites: timeout":      {args: []string{"prerequisites", "--timeout", "-1s"}, code: 2, stderr: "--timeout must be positive, got -1s"},
			"prerequisites: valid":        {args: []string{"prerequisites", "--set", "adminGroups={system:masters}", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
			"prerequisites: missing file": {args: []string{"prerequisites", "-f", "{missing}"}, code: 2, stderr: "--values: open "},
		} {
			if verb == "install" && tc.stderr == reachedCluster && strings.HasPrefix(name, "plane:") {
				// The plane chart has no default image: an install names one.
				tc.args = append(tc.args, "--set", "image.repository=registry.example/cdplane")
			}
			tc.args = append([]string{verb}, tc.args...)
			cases[verb+" "+name] = tc
		}
	}
	// An install without an image is refused before the cluster is read; an apply takes the
	// release's, unless --reset-values.
	noImage := "chart cdplane refuses these values: image.repository is not set: set it to the registry and repository the cdplane image was pushed to"
	cases["install plane: no image"] = cliCase{args: []string{"install", "plane", "--control-plane-id", "plane-a", "--kubeconfig", "{missing}"}, code: 2, stderr: noImage}
	cases["apply plane: the release's image"] = cliCase{args: []string{"apply", "plane", "--control-plane-id", "plane-a", "--set", "logVerbosity=2", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster}
	cases["apply plane: --reset-values, no image"] = cliCase{args: []string{"apply", "plane", "--control-plane-id", "plane-a", "--reset-values", "--kubeconfig", "{missing}"}, code: 2, stderr: noImage}
	cases["install plane: no --reset-values"] = cliCase{args: []string{"install", "plane", "--reset-values"}, code: 2, stderr: "unknown flag: --reset-values"}
	runCases(t, cases)
}

// TestDestroyValidation: destroy checks its flags before it reads a kubeconfig, and destroys
// the legacy plane only when told so: without --control-plane-id or the environment variable
// it refuses rather than pick the default.
func TestDestroyValidation(t *testing.T) {
	runCases(t, map[string]cliCase{
		"plane: no id":                  {args: []string{"destroy", "plane"}, code: 3, stderr: "name the control plane to destroy: --control-plane-id ID, or --control-plane-id= for the legacy plane"},
		"plane: no id, deleting":        {args: []string{"destroy", "plane", "--delete-domains", "--kubeconfig", "{missing}"}, code: 3, stderr: "name the control plane to destroy"},
		"plane: the legacy, explicitly": {args: []string{"destroy", "plane", "--control-plane-id=", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		"plane: id from env":            {args: []string{"destroy", "plane", "--kubeconfig", "{missing}"}, env: "plane-a", code: 1, stderr: reachedCluster},
		"plane: invalid id":             {args: []string{"destroy", "plane", "--control-plane-id", "Plane-A"}, code: 2, stderr: `invalid control-plane id "Plane-A": must be lowercase`},
		"plane: invalid id from env":    {args: []string{"destroy", "plane"}, env: "Plane-A", code: 2, stderr: `invalid control-plane id "Plane-A"`},
		"plane: an argument":            {args: []string{"destroy", "plane", "plane-a"}, code: 2, stderr: `unknown command "plane-a" for "cdplane destroy plane"`},
		"plane: takes no values":        {args: []string{"destroy", "plane", "--control-plane-id", "plane-a", "--set", "a=b"}, code: 2, stderr: "unknown flag: --set"},
		"plane: timeout":                {args: []string{"destroy", "plane", "--control-plane-id", "plane-a", "--timeout", "0s"}, code: 2, stderr: "--timeout must be positive"},
		"plane: every problem named":    {args: []string{"destroy", "plane", "--control-plane-id", "Plane-A", "--timeout", "0s"}, code: 2, stderr: "--timeout must be positive, got 0s\ninvalid control-plane id"},
		"plane: valid":                  {args: []string{"destroy", "plane", "--control-plane-id", "plane-a", "--delete-domains", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		"prerequisites: valid":          {args: []string{"destroy", "prerequisites", "--kubeconfig", "{missing}"}, code: 1, stderr: reachedCluster},
		"prerequisites: timeout":        {args: []string{"destroy", "prerequisites", "--timeout", "0s"}, code: 2, stderr: "--timeout must be positive"},
		"prerequisites: no values":      {args: []string{"destroy", "prerequisites", "-f", "{values}"}, code: 2, stderr: "unknown shorthand flag: 'f'"},
		"prerequisites: takes no id":    {args: []string{"destroy", "prerequisites", "--control-plane-id", "plane-a"}, code: 2, stderr: "unknown flag: --control-plane-id"},
	})
}
