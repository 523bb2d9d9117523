package claims

import (
	"strings"
	"testing"

	"cdplane/internal/kubeletplugin/failure"
)

func TestIMEXConfigTemplate(t *testing.T) {
	tmpl, err := IMEXConfigTemplate()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"BIND_INTERFACE_IP={{POD_IP}}", "IMEX_CMD_BIND_INTERFACE_IP={{POD_IP}}", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes.cfg", "SERVER_PORT=50000"} {
		if !strings.Contains(string(tmpl), line+"\n") {
			t.Errorf("template lacks %q:\n%s", line, tmpl)
		}
	}
}

func TestCheckDaemonNamespace(t *testing.T) {
	if err := checkDaemonNamespace("driver", "c", "driver"); err != nil {
		t.Errorf("driver namespace: %v", err)
	}
	if err := checkDaemonNamespace("ns", "c", "driver"); !failure.IsPermanent(err) {
		t.Errorf("daemon claim elsewhere: %v, want a permanent error", err)
	}
}
