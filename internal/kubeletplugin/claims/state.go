// Package claims is the claim state of the kubelet plugin: what preparing and unpreparing a
// claim changes on the node (CDI specs, the checkpoint, the node's ComputeDomain label, the
// domains' IMEX config directories), the plan read from a claim's allocation, its opaque
// configs, and the sweeps that remove what no claim needs any more. State does it; the plugin's
// Driver is the DRA shim that calls it.
package claims

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/checkpoint"
)

// Config is what the claims' state needs of the plugin's options (see kubeletplugin.Options).
type Config struct {
	// NodeName is the node the plugin serves.
	NodeName string
	// DriverNamespace is the plane's driver namespace: daemon claims live there.
	DriverNamespace string
	// StateDir holds the domains' IMEX config directories (StateDir/domains/<UID>).
	StateDir string
	// CDIRoot is the directory claim CDI specs are written to; the stale sweep reads it.
	CDIRoot string
	// NvidiaDriverRoot, ContainerDriverRoot and DevRoot are the host driver's root, where the
	// plugin reads it, and where it reads the host's /dev; NvidiaDriverRoot empty: daemon
	// claims get no driver files.
	NvidiaDriverRoot    string
	ContainerDriverRoot string
	DevRoot             string
	// ReadHostFile reads the host's /proc files.
	ReadHostFile func(path string) ([]byte, error)
	// Gates are the feature gates.
	Gates featuregate.FeatureGate
	// IMEXMode is who runs IMEX on the node.
	IMEXMode features.IMEXMode
	// HostIMEXSocketPath is the host IMEX command socket, below the driver root (hostManaged).
	HostIMEXSocketPath string
}

// Checkpoint is the record of the node's claims (*checkpoint.Store).
type Checkpoint interface {
	Get(uid types.UID) (checkpoint.ClaimEntry, bool)
	Put(uid types.UID, e checkpoint.ClaimEntry) error
	Remove(uid types.UID) error
	Snapshot() map[types.UID]checkpoint.ClaimEntry
}

// Specs writes and removes the claims' CDI specs (*cdi.Writer).
type Specs interface {
	Exists(name string) bool
	Write(spec *cdispec.Spec, name string) error
	Remove(name string) error
}

// Domains is the view of domains and their daemons' readiness on the watch cache
// (*readiness.View).
type Domains interface {
	Domain(ctx context.Context, uid string) (*metav1.PartialObjectMetadata, error)
	DomainExists(ctx context.Context, uid string) (bool, error)
	WaitDaemonReady(ctx context.Context, cdUID, cliqueID, node string) error
}

// Clique is the node's clique as last discovered (*devices.CliqueTracker).
type Clique interface {
	Current() (string, error)
	Blocked() (string, error)
}

// DeviceNodes finds the device nodes a claim's CDI spec injects (devices.Nodes).
type DeviceNodes interface {
	Channels(ids []int) ([]*cdispec.DeviceNode, error)
	IMEXMgmt() (*cdispec.DeviceNode, error)
}

// Locks serialise the calls of each claim (*claimlock.Locks).
type Locks interface {
	Prepare(ctx context.Context, uid types.UID) (context.Context, func(), error)
	Unprepare(uid types.UID) func()
}

// DomainLabel edits the node's ComputeDomain label (NodeLabeler).
type DomainLabel interface {
	AddDomain(ctx context.Context, domain string) error
	RemoveDomain(ctx context.Context, domain string, self types.UID, claims map[types.UID]checkpoint.ClaimEntry) error
}

// Deps are what State changes and reads, each through its narrow interface.
type Deps struct {
	// API reads claims (uncached: fresh reads).
	API        client.Reader
	Checkpoint Checkpoint
	Specs      Specs
	Domains    Domains
	Clique     Clique
	Nodes      DeviceNodes
	Locks      Locks
	Label      DomainLabel
	// Swept, when set, is given the checkpoint's claims after a stale sweep removed those whose
	// ResourceClaim is gone (the metrics' prepared gauge).
	Swept func(map[types.UID]checkpoint.ClaimEntry)
}

// State prepares and unprepares the node's claims, recovers those a previous run left, and
// sweeps what no claim needs any more.
type State struct {
	cfg    Config
	api    client.Reader
	cp     Checkpoint
	cdi    Specs
	view   Domains
	clique Clique
	nodes  DeviceNodes
	label  DomainLabel
	swept  func(map[types.UID]checkpoint.ClaimEntry)

	// opMu serializes prepares and unprepares, except while a channel prepare waits for its
	// daemon: the kubelet calls concurrently (the helper's serialization is off), so that the
	// daemon claim a waiting channel prepare needs can be prepared meanwhile.
	opMu sync.Mutex
	// locks serialises the calls of each claim for their whole run, and keeps a prepare from
	// completing after an unprepare of its claim. Taken before opMu.
	locks Locks
}

// New returns the claims' state of a node.
func New(cfg Config, deps Deps) *State {
	return &State{cfg: cfg, api: deps.API, cp: deps.Checkpoint, cdi: deps.Specs, view: deps.Domains, clique: deps.Clique,
		nodes: deps.Nodes, label: deps.Label, swept: deps.Swept, locks: deps.Locks}
}

// Snapshot returns a copy of the claims the node holds.
func (s *State) Snapshot() map[types.UID]checkpoint.ClaimEntry { return s.cp.Snapshot() }
