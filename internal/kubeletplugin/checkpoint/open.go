package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"cdplane/internal/atomicfile"
)

// bootIDFile holds the running kernel's boot id. NVIDIA's checkpoint records the boot id it was
// written under; a claim it prepared before the node rebooted is no longer prepared.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// asideTimeFormat is the time in the names of files set aside: UTC, to the second.
const asideTimeFormat = "20060102T150405Z"

// Opener opens the plugin's checkpoint file. now names the files it sets aside;
// bootID tells the running kernel's boot id.
type Opener struct {
	now    func() time.Time
	bootID func() (string, error)
}

// NewOpener returns the plugin's opener: the real clock and the running kernel's boot id.
func NewOpener() Opener {
	return Opener{now: time.Now, bootID: readBootID}
}

func readBootID() (string, error) {
	data, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", fmt.Errorf("reading the node's boot id: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Open reads the checkpoint file in dir and starts from it; no file is an empty checkpoint.
//
//   - This plugin's format (see Decode) is used as it is.
//   - The checkpoint NVIDIA's compute-domain kubelet plugin keeps at the same path (every format
//     it has written, see nvidia.go) is converted, claim by claim. The original is
//     first copied to <file>.nvidia-<format>.bak, then the converted checkpoint replaces it.
//   - A file that is neither, that fails its checksum, or that has a version no reader here
//     knows is renamed to <file>.unreadable-<UTC time>, and the plugin starts with an empty
//     checkpoint: refusing to start would not make the file readable.
//
// Each outcome but the first is logged at V(0). Only failures to read, rename or write files
// are returned.
func (o Opener) Open(ctx context.Context, dir string) (*Store, error) {
	logger := klog.FromContext(ctx)
	s := &Store{path: filepath.Join(dir, File), cp: emptyCheckpoint()}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	decoded, err := Decode(s.path, data)
	cp, nv := decoded.Checkpoint, decoded.nvidia
	var unreadable *UnreadableCheckpointError
	switch {
	case errors.As(err, &unreadable):
		aside, err := o.setAside(s.path)
		if err != nil {
			return nil, err
		}
		logger.Error(unreadable, "Checkpoint cannot be read, so it is moved aside and the plugin starts with an empty checkpoint:"+
			" the claims prepared before are not known, and their unprepare succeeds without undoing anything;"+
			" their CDI specs stay until the node reboots or they are removed by hand, their ComputeDomain's node label"+
			" and config directory go when that ComputeDomain is deleted",
			"file", s.path, "keptAs", aside)
		return s, nil
	case err != nil:
		return nil, err
	case nv == nil:
		s.cp = cp
		return s, nil
	}
	o.checkBoot(ctx, nv)
	keptAs, err := keepCopy(s.path, ".nvidia-"+string(nv.Format), ".bak", data)
	if err != nil {
		return nil, err
	}
	cp = Checkpoint{Version: Version, Claims: nv.Claims}
	if err := write(s.path, cp); err != nil {
		return nil, fmt.Errorf("writing the checkpoint converted from NVIDIA's (the original is kept as %s): %w", keptAs, err)
	}
	s.cp = cp
	logTakeOver(logger, s.path, keptAs, nv)
	return s, nil
}

// checkBoot marks the claims of a checkpoint written before the node last booted
// PrepareStarted: what their prepare made may be gone (CDI specs live on a tmpfs), so a prepare
// must do it again and an unprepare must undo whatever is left, as for a prepare that was
// interrupted. A checkpoint that records no boot id (NVIDIA's before v0.4.0) is taken as
// written since the last boot, as NVIDIA's plugin takes it.
func (o Opener) checkBoot(ctx context.Context, nv *nvidiaCheckpoint) {
	if nv.BootID == "" {
		return
	}
	logger := klog.FromContext(ctx)
	current, err := o.bootID()
	if err != nil {
		logger.Error(err, "Cannot tell whether the node rebooted since NVIDIA's checkpoint was written; its claims keep their states",
			"checkpointBootID", nv.BootID)
		return
	}
	if current == nv.BootID {
		return
	}
	var marked int
	for uid, e := range nv.Claims {
		if e.State == PrepareCompleted {
			e.State = PrepareStarted
			nv.Claims[uid] = e
			marked++
		}
	}
	logger.Info("NVIDIA's checkpoint was written before the node rebooted: its prepared claims are marked PrepareStarted,"+
		" so that a prepare redoes them and an unprepare undoes what is left",
		"checkpointBootID", nv.BootID, "bootID", current, "claims", marked)
}

// logTakeOver says what was taken over from NVIDIA's checkpoint: one V(0) line, each claim at
// V(1), and each claim whose conversion had to guess at V(0).
func logTakeOver(logger klog.Logger, path, keptAs string, nv *nvidiaCheckpoint) {
	states := map[ClaimState]int{}
	for uid, e := range nv.Claims {
		states[e.State]++
		logger.V(1).Info("Took over a claim from NVIDIA's checkpoint", "claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid,
			"state", e.State, "kind", e.Kind, "domainID", e.DomainID, "cdiSpec", e.CDISpec, "devices", len(e.Devices))
	}
	for uid, note := range nv.Notes {
		e := nv.Claims[uid]
		logger.Info("Claim taken over from NVIDIA's checkpoint: "+note, "claim", klog.KRef(e.Namespace, e.Name), "claimUID", uid)
	}
	kv := []any{"file", path, "nvidiaFormat", nv.Format, "keptAs", keptAs, "claims", len(nv.Claims),
		"prepareCompleted", states[PrepareCompleted], "prepareStarted", states[PrepareStarted], "prepareAborted", states[PrepareAborted]}
	if len(nv.Ignored) > 0 {
		kv = append(kv, "ignoredSections", nv.Ignored)
	}
	logger.Info("Took over NVIDIA's checkpoint: its claims are in this plugin's format now, the original is kept aside", kv...)
}

// setAside renames an unreadable checkpoint to <path>.unreadable-<UTC time>, never over another
// file, and returns the new name.
func (o Opener) setAside(path string) (string, error) {
	aside, _, err := freeName(path+".unreadable-"+o.now().UTC().Format(asideTimeFormat), "", nil)
	if err != nil {
		return "", err
	}
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("moving the unreadable checkpoint aside: %w", err)
	}
	return aside, nil
}

// keepCopy writes data to <path><infix><suffix>, or, when that name holds other content, to
// the first free <path><infix>-N<suffix>. A file that already holds data (a conversion stopped
// before it wrote the converted checkpoint) is used again. It returns the name.
func keepCopy(path, infix, suffix string, data []byte) (string, error) {
	name, exists, err := freeName(path+infix, suffix, data)
	if err != nil || exists {
		return name, err
	}
	if err := atomicfile.Write(name, data, 0o600); err != nil {
		return "", fmt.Errorf("keeping a copy of the checkpoint: %w", err)
	}
	return name, nil
}

// freeName returns prefix+suffix, or the first of prefix-2+suffix, prefix-3+suffix, … that
// names no file; with same set, a file that holds exactly same is returned too (exists true).
func freeName(prefix, suffix string, same []byte) (name string, exists bool, err error) {
	for i := 1; i <= 1000; i++ {
		name = prefix + suffix
		if i > 1 {
			name = fmt.Sprintf("%s-%d%s", prefix, i, suffix)
		}
		got, err := os.ReadFile(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return name, false, nil
		case err == nil && same != nil && bytes.Equal(got, same):
			return name, true, nil
		case err != nil && !errors.Is(err, syscall.EISDIR):
			return "", false, fmt.Errorf("checking %s: %w", name, err)
		}
	}
	return "", false, fmt.Errorf("no free file name like %s%s", prefix, suffix)
}
