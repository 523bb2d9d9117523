package simkubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cdplane/internal/testutil"
)

// TestLogServerRequiresTheAPIServersCertificate: a simulated node's log endpoint, reachable on a
// loopback address by every local user, answers only a client certificate signed by the
// cluster's CA (the apiserver's kubelet client certificate; GetLogs through the apiserver is
// tested in TestPlainPod). Without one, the TLS handshake fails and no log is served.
func TestLogServerRequiresTheAPIServersCertificate(t *testing.T) {
	t.Parallel()
	var addr string
	testutil.Eventually(t, 90*time.Second, "node "+nodeA+" reports its kubelet port", func() (bool, error) {
		node, err := kube.CoreV1().Nodes().Get(context.Background(), nodeA, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		for _, a := range node.Status.Addresses {
			if a.Type == "InternalIP" && port != 0 {
				addr = net.JoinHostPort(a.Address, strconv.Itoa(int(port)))
			}
		}
		return addr != "", fmt.Errorf("addresses %v, port %d", node.Status.Addresses, port)
	})
	anonymous := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the client is the attacker; the server's identity is not the point
	}}
	for _, path := range []string{"/containerLogs/default/x/main", "/healthz"} {
		resp, err := anonymous.Get("https://" + addr + path)
		if err == nil {
			_ = resp.Body.Close()
			t.Errorf("GET %s without a client certificate: %s, want the TLS handshake refused", path, resp.Status)
		}
	}
}
