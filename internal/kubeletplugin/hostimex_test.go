package kubeletplugin

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"cdplane/internal/component"
	"cdplane/internal/testutil"
)

// The readiness probe reads what the chart puts in the environment, and prints READY.
func TestCheckHostIMEXCommand(t *testing.T) {
	root, _ := testutil.HostIMEXFixture(t, "READY", 0, true)
	if os.Geteuid() == 0 {
		// Run as root, the probe chroots into the root, where a shell script finds no shell.
		testutil.StaticIMEXCtl(t, root)
	}
	env := map[string]string{NvidiaDriverRootEnv: "/", ContainerDriverRootEnv: root, HostIMEXSocketPathEnv: "/s.sock", IMEXModeEnv: "hostManaged"}
	var out bytes.Buffer
	inv := component.Invocation{
		Args: []string{CommandCheckHostIMEX}, Stdout: &out, Stderr: &out,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}
	if err := Run(context.Background(), inv, Host{}); err != nil {
		t.Fatalf("check-host-imex: %v", err)
	}
	if out.String() != "READY\n" {
		t.Errorf("output %q, want READY", out.String())
	}

	env[HostIMEXSocketPathEnv] = "/other.sock"
	if err := Run(context.Background(), inv, Host{}); err == nil || !strings.Contains(err.Error(), "no command socket at /other.sock") {
		t.Errorf("check-host-imex with a missing socket: %v, want an error naming it", err)
	}
	env[IMEXModeEnv] = "driverManaged"
	if err := Run(context.Background(), inv, Host{}); err == nil || !strings.Contains(err.Error(), "there is no host IMEX to check") {
		t.Errorf("check-host-imex in driverManaged mode: %v, want a refusal", err)
	}
}
