package app

import (
	"context"
	"strings"
	"testing"

	"cdplane/internal/features"
)

func invocation(args []string, env map[string]string) (Invocation, *strings.Builder) {
	out := &strings.Builder{}
	return Invocation{
		Args:      args,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdout:    out, Stderr: out,
	}, out
}

// daemonEnv is a fabric-less daemon's identity: its check succeeds without IMEX.
func daemonEnv() map[string]string {
	return map[string]string{
		"NODE_NAME": "n1", "POD_IP": "127.0.0.1", "POD_NAME": "d", "POD_NAMESPACE": "cdplane", "POD_UID": "u",
		"COMPUTE_DOMAIN_UUID": "cd-uid", "COMPUTE_DOMAIN_NAME": "cd", "COMPUTE_DOMAIN_NAMESPACE": "default",
		"CLIQUE_ID": "",
	}
}

// In-process invocations read their own arguments and environment and leave the process-wide
// feature gates alone.
func TestDaemonInvocationIsSelfContained(t *testing.T) {
	before := features.Gates.Enabled(features.ComputeDomainCliques)
	inv, _ := invocation([]string{"check", "--feature-gates=ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false", "--imex=sim"}, daemonEnv())
	if err := Daemon(context.Background(), inv); err != nil {
		t.Fatalf("check of a fabric-less daemon: %v", err)
	}
	if got := features.Gates.Enabled(features.ComputeDomainCliques); got != before {
		t.Errorf("the invocation changed the process-wide gate ComputeDomainCliques to %v", got)
	}

	env := daemonEnv()
	delete(env, "NODE_NAME")
	inv, _ = invocation([]string{"check", "--imex=sim"}, env)
	if err := Daemon(context.Background(), inv); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("without NODE_NAME in its environment: %v, want an error naming it", err)
	}

	inv, _ = invocation([]string{"check", "--imex=sim"}, daemonEnv())
	inv.LookupEnv = func(k string) (string, bool) {
		if k == "FEATURE_GATES" {
			return "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false", true
		}
		return daemonEnv()[k], daemonEnv()[k] != "" || k == "CLIQUE_ID"
	}
	if err := Daemon(context.Background(), inv); err == nil || !strings.Contains(err.Error(), "requires IMEXDaemonsWithDNSNames=true") {
		t.Errorf("invalid FEATURE_GATES from the environment: %v", err)
	}

	inv, _ = invocation([]string{"serve"}, nil)
	if err := Daemon(context.Background(), inv); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("unknown subcommand: %v", err)
	}
}

func TestKubeletPluginInvocationErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad plane id":      {[]string{"--control-plane-id=Bad_ID"}, nil, "Bad_ID"},
		"unknown flag":      {[]string{"--no-such-flag"}, nil, "no-such-flag"},
		"no kubeconfig":     {[]string{"--nvml=sim", `--nvml-sim-spec={"node":"n1","gpus":1}`}, map[string]string{"NODE_NAME": "n1"}, "no kubeconfig"},
		"missing spec file": {[]string{"--nvml=sim", "--nvml-sim-spec-file=/nonexistent/spec.json"}, nil, "--nvml-sim-spec-file"},
	} {
		t.Run(name, func(t *testing.T) {
			inv, _ := invocation(tc.args, tc.env)
			err := KubeletPlugin(context.Background(), inv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
