package checkpoint

// NVIDIA's compute-domain kubelet plugin, which this plugin replaces, keeps its checkpoint where
// this plugin keeps its own: checkpoint.json in the plugin data directory
// /var/lib/kubelet/plugins/compute-domain.nvidia.com, written through the kubelet's
// checkpointmanager. Every layout it has written there has a top-level "checksum":
//
//	v1rc: {"checksum":N,"v1":{"preparedClaims":{"<claim UID>":[<group>, …]}}}
//	      releases v25.3.0-rc.1 and rc.2 (NVIDIA names it the 25.3.0-rc.2 format)
//	v1:   {"checksum":N,"v1":{"preparedClaims":{"<claim UID>":{"status":<ResourceClaimStatus>,
//	      "preparedDevices":[<group>, …]}}}}
//	      v25.3.0-rc.3 to v25.3.2
//	v2:   {"checksum":N,"v1":{…},"v2":{"checksum":M,"preparedClaims":{"<claim UID>":
//	      {"checkpointState":…,"status":…,"preparedDevices":[…],"name":…,"namespace":…,"abortedAt":…}},
//	      "nodeBootID":…}}
//	      v25.8.0 on; v1 holds a copy of the PrepareCompleted claims for a downgrade; nodeBootID
//	      since v0.4.0, PrepareAborted and abortedAt since June 2026 (in no release yet)
//
// A group is {"devices":[{"channel":{"info":{"id":N},"device":<device>},"daemon":null}, …],
// "configState":{"Type":"channel"|"daemon","ComputeDomain":"<ComputeDomain UID>"}}, and a device
// is the kubelet's DRA device as Go marshals it, {"Requests","PoolName","DeviceName",
// "CDIDeviceIDs"}; in v1rc it is the DRA protobuf message, {"request_names","pool_name",
// "device_name","cdi_device_ids"}. Builds between the releases also wrote v1rc with Go's device
// fields, v1rc without "Type", v2 without its own checksum (the top-level one then covered the
// whole file), and v2 PrepareStarted claims without name and namespace; they are read too.
//
// The checksum is the checkpointmanager's: FNV-32a of the k8s.io/utils/dump.ForHash rendering of
// the JSON bytes marshalled with the checksum at 0. The top-level one covers
// {"checksum":0,"v1":<v1>}; v2's covers v2.
//
// NVIDIA's plugin writes a claim's CDI spec as k8s.compute-domain.nvidia.com-claim_<claim
// UID>.yaml in the CDI directory (the same vendor and class as this plugin's, through the CDI
// cache's default encoding), labels the node for a channel claim's ComputeDomain with the same
// label as this plugin, and keeps a daemon claim's IMEX config directory in domains/<ComputeDomain
// UID> of its plugin data directory, where this plugin keeps it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/dump"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/devices"
)

// nvidiaFormat names a layout of NVIDIA's checkpoint; the copy of the original is named after it.
type nvidiaFormat string

const (
	nvidiaV1RC nvidiaFormat = "v1rc"
	nvidiaV1   nvidiaFormat = "v1"
	nvidiaV2   nvidiaFormat = "v2"
)

// nvidiaCheckpoint is NVIDIA's checkpoint converted to this plugin's entries.
type nvidiaCheckpoint struct {
	Format nvidiaFormat
	// BootID is the boot id the checkpoint was written under, "" when it records none.
	BootID string
	Claims map[types.UID]ClaimEntry
	// Notes say, for claims whose conversion had to guess, what was guessed.
	Notes map[types.UID]string
	// Ignored lists top-level sections of a later layout than v2, which are not read.
	Ignored []string
}

// nvidiaCDISpecName is the file name of the CDI spec NVIDIA's plugin writes for a claim.
func nvidiaCDISpecName(claimUID types.UID) string {
	return cdiapi.GenerateTransientSpecName(cdi.Vendor, cdi.Class, string(claimUID)) + ".yaml"
}

// The layout of NVIDIA's checkpoint, as far as it is read.

type nvidiaV1Section struct {
	PreparedClaims map[string]json.RawMessage `json:"preparedClaims"`
}

type nvidiaV2Section struct {
	PreparedClaims map[string]*nvidiaClaim `json:"preparedClaims"`
	NodeBootID     string                  `json:"nodeBootID"`
}

type nvidiaClaim struct {
	CheckpointState string               `json:"checkpointState"`
	Status          nvidiaClaimStatus    `json:"status"`
	PreparedDevices []*nvidiaDeviceGroup `json:"preparedDevices"`
	Name            string               `json:"name"`
	Namespace       string               `json:"namespace"`
}

type nvidiaDeviceGroup struct {
	Devices     []nvidiaPreparedDevice `json:"devices"`
	ConfigState struct {
		Type          string `json:"Type"`
		ComputeDomain string `json:"ComputeDomain"`
	} `json:"configState"`
}

type nvidiaPreparedDevice struct {
	Channel *nvidiaDeviceOfKind `json:"channel"`
	Daemon  *nvidiaDeviceOfKind `json:"daemon"`
}

type nvidiaDeviceOfKind struct {
	Device *nvidiaDRADevice `json:"device"`
}

// nvidiaDRADevice is either form of the kubelet's DRA device.
type nvidiaDRADevice struct {
	Requests     []string `json:"Requests"`
	PoolName     string   `json:"PoolName"`
	DeviceName   string   `json:"DeviceName"`
	CDIDeviceIDs []string `json:"CDIDeviceIDs"`

	RequestNames      []string `json:"request_names"`
	ProtoPool         string   `json:"pool_name"`
	ProtoDevice       string   `json:"device_name"`
	ProtoCDIDeviceIDs []string `json:"cdi_device_ids"`
}

func (d *nvidiaDRADevice) prepared() PreparedDevice {
	first := func(a, b []string) []string {
		if len(a) > 0 {
			return a
		}
		return b
	}
	firstString := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return PreparedDevice{
		Requests:     first(d.Requests, d.RequestNames),
		Pool:         firstString(d.PoolName, d.ProtoPool),
		Device:       firstString(d.DeviceName, d.ProtoDevice),
		CDIDeviceIDs: first(d.CDIDeviceIDs, d.ProtoCDIDeviceIDs),
	}
}

// nvidiaClaimStatus is the part of a ResourceClaimStatus that names the claim's devices and
// ComputeDomain.
type nvidiaClaimStatus struct {
	Allocation *struct {
		Devices struct {
			Results []struct {
				Driver string `json:"driver"`
				Device string `json:"device"`
			} `json:"results"`
			Config []struct {
				Opaque *struct {
					Driver     string          `json:"driver"`
					Parameters json.RawMessage `json:"parameters"`
				} `json:"opaque"`
			} `json:"config"`
		} `json:"devices"`
	} `json:"allocation"`
}

// decodeNVIDIACheckpoint verifies the checksums of NVIDIA's checkpoint (top holds its top-level
// sections) and converts its claims. The v2 section is read when there is one (its v1 is a copy
// for a downgrade), else v1.
func decodeNVIDIACheckpoint(data []byte, top map[string]json.RawMessage) (*nvidiaCheckpoint, error) {
	if err := verifyNVIDIAChecksums(data, top); err != nil {
		return nil, err
	}
	nv := &nvidiaCheckpoint{Claims: map[types.UID]ClaimEntry{}, Notes: map[types.UID]string{}}
	for key := range top {
		if key != "checksum" && key != "v1" && key != "v2" {
			nv.Ignored = append(nv.Ignored, key)
		}
	}
	sort.Strings(nv.Ignored)
	var claims map[string]*nvidiaClaim
	if raw, ok := top["v2"]; ok {
		var v2 nvidiaV2Section
		if err := json.Unmarshal(raw, &v2); err != nil {
			return nil, fmt.Errorf("its v2 section cannot be decoded: %w", err)
		}
		nv.Format, nv.BootID, claims = nvidiaV2, v2.NodeBootID, v2.PreparedClaims
	} else if raw, ok := top["v1"]; ok {
		var err error
		if nv.Format, claims, err = decodeNVIDIAV1(raw); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("it has no section this plugin reads (v1 or v2), only %v", sortedKeys(top))
	}
	for uid, c := range claims {
		if uid == "" || c == nil {
			return nil, fmt.Errorf("it lists a claim without UID or state (%q)", uid)
		}
		e, note := nvidiaClaimEntry(types.UID(uid), c)
		nv.Claims[types.UID(uid)] = e
		if note != "" {
			nv.Notes[types.UID(uid)] = note
		}
	}
	return nv, nil
}

// decodeNVIDIAV1 reads a v1 section: each claim is a list of groups (v1rc) or an object with
// status and groups (v1). Every claim in it was PrepareCompleted.
func decodeNVIDIAV1(raw json.RawMessage) (nvidiaFormat, map[string]*nvidiaClaim, error) {
	var v1 nvidiaV1Section
	if err := json.Unmarshal(raw, &v1); err != nil {
		return "", nil, fmt.Errorf("its v1 section cannot be decoded: %w", err)
	}
	format := nvidiaFormat("")
	claims := make(map[string]*nvidiaClaim, len(v1.PreparedClaims))
	for uid, rawClaim := range v1.PreparedClaims {
		c := &nvidiaClaim{}
		var f nvidiaFormat
		var err error
		switch trimmed := bytes.TrimSpace(rawClaim); {
		case bytes.HasPrefix(trimmed, []byte("[")):
			f, err = nvidiaV1RC, json.Unmarshal(rawClaim, &c.PreparedDevices)
		case bytes.HasPrefix(trimmed, []byte("{")):
			f, err = nvidiaV1, json.Unmarshal(rawClaim, c)
		default:
			err = errors.New("is neither a list of device groups nor an object")
		}
		if err != nil {
			return "", nil, fmt.Errorf("its v1 claim %s cannot be decoded: %w", uid, err)
		}
		if format != "" && f != format {
			return "", nil, errors.New("its v1 section mixes claims of two layouts")
		}
		format = f
		c.CheckpointState = string(PrepareCompleted)
		claims[uid] = c
	}
	if format == "" {
		format = nvidiaV1
	}
	return format, claims, nil
}

// nvidiaClaimEntry converts one claim. note is empty unless something had to be guessed.
//
// State: PrepareStarted, PrepareCompleted and PrepareAborted carry over (v1 and v1rc list
// completed claims only); a state this plugin does not know is taken as PrepareStarted, the one
// whose prepare is redone and whose unprepare undoes everything. Kind and domain: from the
// prepared devices and their group's configState, else from the claim's allocation. CDISpec:
// NVIDIA's spec file name, unless the claim was aborted (its spec is gone) or completed without a
// device of the claim spec (none was written).
func nvidiaClaimEntry(uid types.UID, c *nvidiaClaim) (ClaimEntry, string) {
	e := ClaimEntry{Namespace: c.Namespace, Name: c.Name}
	var notes []string
	switch s := ClaimState(c.CheckpointState); s {
	case PrepareStarted, PrepareCompleted, PrepareAborted:
		e.State = s
	default:
		e.State = PrepareStarted
		notes = append(notes, fmt.Sprintf("its state %q is not one this plugin knows, so it is taken as PrepareStarted", c.CheckpointState))
	}
	kind, domain, note := nvidiaKindAndDomain(c)
	e.Kind, e.DomainID = string(kind), domain
	if note != "" {
		notes = append(notes, note)
	}
	withClaimSpec := false
	for _, g := range c.PreparedDevices {
		if g == nil {
			continue
		}
		for _, d := range g.Devices {
			for _, of := range []*nvidiaDeviceOfKind{d.Channel, d.Daemon} {
				if of == nil || of.Device == nil {
					continue
				}
				p := of.Device.prepared()
				for _, id := range p.CDIDeviceIDs {
					withClaimSpec = withClaimSpec || strings.HasPrefix(id, cdi.Kind+"=")
				}
				e.Devices = append(e.Devices, p)
			}
		}
	}
	if e.State == PrepareStarted || (e.State == PrepareCompleted && withClaimSpec) {
		e.CDISpec = nvidiaCDISpecName(uid)
	}
	return e, strings.Join(notes, "; ")
}

// nvidiaKindAndDomain tells a claim's kind and ComputeDomain UID from its prepared devices and
// their groups, else from its allocation. A claim with both kinds is taken as a channel claim:
// the node label is the one thing an unprepare must undo that a daemon claim does not have.
func nvidiaKindAndDomain(c *nvidiaClaim) (devices.DeviceKind, string, string) {
	allocated, configDomains := nvidiaAllocation(c.Status)
	domains := map[devices.DeviceKind]string{}
	record := func(kind devices.DeviceKind, domain string) {
		if domains[kind] == "" {
			domains[kind] = domain
		}
	}
	for _, g := range c.PreparedDevices {
		if g == nil {
			continue
		}
		for _, d := range g.Devices {
			if d.Channel != nil {
				record(devices.KindChannel, g.ConfigState.ComputeDomain)
			}
			if d.Daemon != nil {
				record(devices.KindDaemon, g.ConfigState.ComputeDomain)
			}
		}
		if len(g.Devices) == 0 && (g.ConfigState.Type == devices.TypeChannel || g.ConfigState.Type == devices.TypeDaemon) {
			record(devices.DeviceKind(g.ConfigState.Type), g.ConfigState.ComputeDomain)
		}
	}
	if len(domains) == 0 {
		for _, kind := range allocated {
			record(kind, "")
		}
	}
	var kind devices.DeviceKind
	var notes []string
	switch {
	case len(domains) == 0:
		return "", "", "it names no channel or daemon device, so its unprepare removes its CDI spec only"
	case len(domains) == 2:
		kind = devices.KindChannel
		notes = append(notes, "it holds both channel and daemon devices, so it is taken as a channel claim")
	default:
		for k := range domains {
			kind = k
		}
	}
	domain := domains[kind]
	if domain == "" {
		domain = configDomains[kind]
	}
	if domain == "" {
		notes = append(notes, "it names no ComputeDomain, so its unprepare leaves the node label alone")
	}
	return kind, domain, strings.Join(notes, "; ")
}

// nvidiaAllocation reads a claim's allocation: the kinds of this driver's devices allocated to
// it, and the ComputeDomain its opaque config of each kind names.
func nvidiaAllocation(status nvidiaClaimStatus) ([]devices.DeviceKind, map[devices.DeviceKind]string) {
	domains := map[devices.DeviceKind]string{}
	if status.Allocation == nil {
		return nil, domains
	}
	alloc := status.Allocation.Devices
	for _, cfg := range alloc.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != cdv1beta1.DriverName {
			continue
		}
		var params struct {
			Kind     string `json:"kind"`
			DomainID string `json:"domainID"`
		}
		if json.Unmarshal(cfg.Opaque.Parameters, &params) != nil {
			continue
		}
		switch params.Kind {
		case cdv1beta1.ComputeDomainChannelConfigKind:
			domains[devices.KindChannel] = params.DomainID
		case cdv1beta1.ComputeDomainDaemonConfigKind:
			domains[devices.KindDaemon] = params.DomainID
		}
	}
	var kinds []devices.DeviceKind
	for _, r := range alloc.Results {
		if r.Driver != cdv1beta1.DriverName {
			continue
		}
		if kind, _, err := devices.ParseDeviceName(r.Device); err == nil {
			kinds = append(kinds, kind)
		}
	}
	return kinds, domains
}

// verifyNVIDIAChecksums checks the checksums the kubelet's checkpointmanager would check. What
// each covers is rebuilt from the file's own bytes, so that no field NVIDIA's types had then
// and this plugin does not know can change it.
func verifyNVIDIAChecksums(data []byte, top map[string]json.RawMessage) error {
	var sum uint64
	if err := json.Unmarshal(top["checksum"], &sum); err != nil {
		return fmt.Errorf("its checksum %s is not a checksum: %w", top["checksum"], err)
	}
	v2, hasV2 := top["v2"]
	var v2Zeroed []byte
	var v2Sum uint64
	v2Own := false
	if hasV2 {
		v2Zeroed, v2Sum, v2Own = zeroChecksum(v2)
	}
	if hasV2 && !v2Own {
		// One build wrote v2 without a checksum of its own; the top-level one covered the file.
		whole, _, ok := zeroChecksum(data)
		if !ok || kubeletChecksum(whole) != sum {
			return fmt.Errorf("fails its checksum %d (it has a v2 section without a checksum of its own)", sum)
		}
		return nil
	}
	covered := []byte(`{"checksum":0`)
	if v1, ok := top["v1"]; ok {
		covered = append(append(covered, `,"v1":`...), v1...)
	}
	covered = append(covered, '}')
	if got := kubeletChecksum(covered); got != sum {
		return fmt.Errorf("fails its checksum: it records %d, its content sums to %d", sum, got)
	}
	if hasV2 {
		if got := kubeletChecksum(v2Zeroed); got != v2Sum {
			return fmt.Errorf("its v2 section fails its checksum: it records %d, its content sums to %d", v2Sum, got)
		}
	}
	return nil
}

// kubeletChecksum is the checksum the kubelet's checkpointmanager computes over marshalled
// bytes: FNV-32a of their k8s.io/utils/dump.ForHash rendering.
func kubeletChecksum(data []byte) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(dump.ForHash(data)))
	return uint64(h.Sum32())
}

// zeroChecksum takes a JSON object that starts with its checksum, as Go marshals the
// checkpoint's structs, and returns it with the checksum set to 0, and the checksum.
func zeroChecksum(obj []byte) ([]byte, uint64, bool) {
	const head = `{"checksum":`
	rest, ok := bytes.CutPrefix(obj, []byte(head))
	if !ok {
		return nil, 0, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	sum, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return nil, 0, false
	}
	out := make([]byte, 0, len(head)+1+len(rest)-n)
	out = append(append(append(out, head...), '0'), rest[n:]...)
	return out, sum, true
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
