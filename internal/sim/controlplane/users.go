package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the control plane's credentials, beside its CA file.
func (cp *ControlPlane) pki() pki { return pki{dir: filepath.Dir(cp.CAFile)} }

// UserConfig returns a client configuration that authenticates as user name in groups with a
// client certificate signed by the cluster CA (issued on each call). Safe for concurrent use.
func (cp *ControlPlane) UserConfig(name string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.pki().issue(name, groups)
	if err != nil {
		return nil, fmt.Errorf("credentials of %s: %w", name, err)
	}
	caPEM, err := os.ReadFile(cp.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	return &rest.Config{Host: cp.APIServerURL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: certPEM, KeyData: keyPEM}}, nil
}

// WriteUserKubeconfig writes to path a kubeconfig, credentials embedded, for user name in
// groups (see UserConfig).
func (cp *ControlPlane) WriteUserKubeconfig(path, name string, groups ...string) error {
	cfg, err := cp.UserConfig(name, groups...)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cdplane"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["cdplane"] = &clientcmdapi.Context{Cluster: "cdplane", AuthInfo: name, Namespace: "default"}
	kc.CurrentContext = "cdplane"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing the kubeconfig of %s: %w", name, err)
	}
	return nil
}

// tlsClient is an HTTP client of the administrator, for the apiserver's health checks.
func tlsClient(p pki) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12,
	}}}, nil
}

// writeKubeconfig writes the administrator's kubeconfig, referring to the pki files.
func writeKubeconfig(path, server string, p pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cdplane-sim"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: p.path("admin.crt"), ClientKey: p.path("admin.key")}
	cfg.Contexts["cdplane-sim"] = &clientcmdapi.Context{Cluster: "cdplane-sim", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "cdplane-sim"
	return clientcmd.WriteToFile(*cfg, path)
}
