package claims

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/atomicfile"
	"cdplane/internal/daemonenv"
	"cdplane/internal/driverroot"
	"cdplane/internal/imex"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

// IMEXConfigTemplateFile is the IMEX config template a daemon claim's config directory holds.
const IMEXConfigTemplateFile = "config.tmpl.cfg"

// PodIPPlaceholder stands for the daemon pod's address in the IMEX config template.
const PodIPPlaceholder = "{{POD_IP}}"

// IMEXConfigTemplate is the imexd config of a domain's daemons with the pod address left as
// PodIPPlaceholder: the same keys and values the daemon renders, with the node list at
// cdv1beta1.DaemonIMEXConfigDir/nodes.cfg.
func IMEXConfigTemplate() ([]byte, error) {
	const sentinel = "192.0.2.254" // TEST-NET-1: never a pod address
	data, err := imex.RenderIMEXConfig(imex.Settings{
		BindIP:          sentinel,
		NodesConfigPath: cdv1beta1.DaemonIMEXConfigDir + "/nodes.cfg",
	})
	if err != nil {
		return nil, err
	}
	return bytes.ReplaceAll(data, []byte("="+sentinel), []byte("="+PodIPPlaceholder)), nil
}

// checkDaemonNamespace refuses a daemon claim outside the driver namespace: the IMEX management
// device is for the plane's own daemons only.
func checkDaemonNamespace(claimNS, claimName, driverNS string) error {
	if claimNS != driverNS {
		return failure.Permanentf("daemon claim %s/%s is not in the driver namespace %s", claimNS, claimName, driverNS)
	}
	return nil
}

// DriverRoot is the host driver's root of the options.
func (c Config) DriverRoot() devices.DriverRoot {
	return devices.DriverRoot{Root: driverroot.Root{Host: c.NvidiaDriverRoot, Container: c.ContainerDriverRoot}, Dev: c.DevRoot}
}

func (s *State) domainConfigDir(cdUID string) string {
	return filepath.Join(s.cfg.StateDir, "domains", cdUID)
}

// prepareDaemon writes the domain's IMEX config template into the domain's directory under the
// state directory, and a CDI spec that gives the daemon container its identity (CLIQUE_ID,
// COMPUTE_DOMAIN_UUID/NAME/NAMESPACE), mounts that directory at /etc/nvidia-imex, gives it what
// nvidia-imex needs from the host driver drv (/dev/nvidiactl, the IMEX binaries and the driver
// libraries, read-only; IMEX_BINARY, IMEX_CTL_BINARY, NVML_LIBRARY and LD_LIBRARY_PATH name
// them), and adds the IMEX management device when the node has a clique.
func (s *State) prepareDaemon(ctx context.Context, claim *resourcev1.ResourceClaim, plan claimPlan, drv devices.DriverFiles) ([]checkpoint.PreparedDevice, string, error) {
	if err := checkDaemonNamespace(claim.Namespace, claim.Name, s.cfg.DriverNamespace); err != nil {
		return nil, "", failure.Tag(failure.WrongNamespace, err)
	}
	cd, err := s.view.Domain(ctx, plan.DomainID)
	if err != nil {
		return nil, "", failure.Tag(failure.DomainNotFound, err)
	}
	cliqueID, err := s.clique.Current()
	if err != nil {
		return nil, "", failure.Tag(failure.CliqueUnknown, err)
	}
	// The directory is bind-mounted read-write into the daemon's container: 0700 keeps every other
	// user of the node out of it (the daemon runs as root; so does the plugin). Chmod covers a
	// directory made before this mode was used.
	dir := s.domainConfigDir(plan.DomainID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("creating the domain's config directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("restricting the domain's config directory: %w", err)
	}
	tmpl, err := IMEXConfigTemplate()
	if err != nil {
		return nil, "", fmt.Errorf("rendering the IMEX config template: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, IMEXConfigTemplateFile), tmpl, 0o644); err != nil {
		return nil, "", fmt.Errorf("writing the IMEX config template: %w", err)
	}
	env := daemonenv.Claim{CliqueID: cliqueID, DomainUID: string(cd.UID), DomainName: cd.Name, DomainNamespace: cd.Namespace,
		IMEXConfigDir: cdv1beta1.DaemonIMEXConfigDir}
	// The loaded driver's version decides whether IMEX takes names in its node list; no file
	// (not a GPU node's /proc): not known, the daemon assumes a current driver.
	if data, err := s.cfg.ReadHostFile(devices.DriverVersionFile); err == nil {
		env.DriverVersion, _ = devices.KernelDriverVersion(data)
	}
	// A node serving without a fabric because its registration failed: the daemon reports it.
	if block, blockErr := s.clique.Blocked(); block == devices.BlockFabricFailed && blockErr != nil {
		env.FabricError = truncateRunes(blockErr.Error(), 256)
	}
	driverMounts, driverDevices := s.cfg.DriverRoot().Edits(drv, &env)
	if s.cfg.NvidiaDriverRoot != "" {
		env.HostIMEXService = s.cfg.DriverRoot().HostIMEXService()
	}
	var mgmtDev *cdispec.DeviceNode
	if cliqueID != "" {
		if mgmtDev, err = s.nodes.IMEXMgmt(); err != nil {
			return nil, "", failure.Tag(failure.Driver, failure.Retryablef("IMEX management device: %w", err))
		}
	}
	// A node publishes one daemon device, so a daemon claim holds exactly one.
	device := plan.Devices[0].Device
	name := cdi.SpecName(claim.UID)
	if err := s.cdi.Write(daemonSpec(claim.UID, device, env, dir, driverMounts, driverDevices, mgmtDev), name); err != nil {
		return nil, "", err
	}
	withCDI := map[string]bool{device: true}
	klog.FromContext(ctx).V(1).Info("Prepared daemon claim", "computeDomain", klog.KObj(cd), "cliqueID", cliqueID)
	return preparedDevices(claim.UID, plan, withCDI), name, nil
}

// truncateRunes keeps at most n runes of s.
func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
