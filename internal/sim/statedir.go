package sim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// markerFile marks a state directory that `sim up` created. `sim up` reuses, and `sim down`
// removes, only a directory that holds it, belongs to the user and is closed to everyone else
// (mode 0700): on a shared host another user can create /tmp/cdplane-sim-<uid> first, or plant
// a state.json whose "processes" are somebody else's.
const markerFile = ".cdplane-sim"

// markerHeader is the first line of the marker.
const markerHeader = "cdplane simulated cluster state directory"

// stateDirMode is the state directory's mode: its owner's alone. Everything the sim serves on
// Unix sockets (etcd, the kubelet plugins' registration and DRA sockets) and its credentials
// (pki/, kubeconfigs, service-account tokens) live under it.
const stateDirMode os.FileMode = 0o700

// UnsafeStateDirError says why a directory is not one the sim may use or remove.
type UnsafeStateDirError struct {
	Dir string
	// Verb is what was refused: "use" or "remove".
	Verb    string
	Reasons []string
}

func (e *UnsafeStateDirError) Error() string {
	return fmt.Sprintf("refusing to %s %s: %s", e.Verb, e.Dir, strings.Join(e.Reasons, "; "))
}

// checkStateDir returns nil when dir is a state directory the sim created: a directory (not a
// symbolic link) owned by the current user, mode 0700, holding the marker. Otherwise an
// *UnsafeStateDirError naming every problem found.
func checkStateDir(dir, verb string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return &UnsafeStateDirError{Dir: dir, Verb: verb, Reasons: []string{err.Error()}}
	}
	reasons := ownership(fi)
	if fi.IsDir() {
		if r := checkMarker(dir); r != "" {
			reasons = append([]string{r}, reasons...)
		}
	}
	if len(reasons) > 0 {
		return &UnsafeStateDirError{Dir: dir, Verb: verb, Reasons: reasons}
	}
	return nil
}

// ownership lists what is wrong with fi as a state directory's own entry: its type, owner and
// mode.
func ownership(fi os.FileInfo) []string {
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return []string{"it is a symbolic link"}
	case !fi.IsDir():
		return []string{"not a directory"}
	}
	var reasons []string
	if r := notOwned(fi); r != "" {
		reasons = append(reasons, r)
	}
	if perm := fi.Mode().Perm(); perm != stateDirMode {
		reasons = append(reasons, fmt.Sprintf("mode %04o, want %04o", perm, stateDirMode))
	}
	return reasons
}

// notOwned says who owns fi when it is not the current user, or "".
func notOwned(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Getuid() {
		return ""
	}
	return fmt.Sprintf("owned by uid %d, not you (uid %d)", st.Uid, os.Getuid())
}

// checkMarker returns what is wrong with dir's marker, or "".
func checkMarker(dir string) string {
	path := filepath.Join(dir, markerFile)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("not created by cdplane sim (no marker %s)", markerFile)
	case err != nil:
		return fmt.Sprintf("cannot read its marker: %v", err)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("its marker %s is not a regular file", markerFile)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("cannot read its marker: %v", err)
	}
	if !strings.HasPrefix(string(data), markerHeader+"\n") {
		return fmt.Sprintf("its marker %s was not written by cdplane sim", markerFile)
	}
	return ""
}

// prepareStateDir makes dir a state directory of the sim: created mode 0700 with the marker when
// missing; an empty directory of the user's is closed (0700) and marked; a state directory the
// sim created is kept. Anything else is refused.
func prepareStateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		// Mkdir, not MkdirAll: a directory someone else creates meanwhile is not ours.
		if err := os.Mkdir(dir, stateDirMode); err != nil {
			return fmt.Errorf("creating the state directory: %w", err)
		}
		return markStateDir(dir)
	}
	if err != nil {
		return err
	}
	if checkStateDir(dir, "use") == nil {
		return nil
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() || notOwned(fi) != "" {
		// A link, a file, or someone else's directory: nothing to fix, only to refuse.
		return &UnsafeStateDirError{Dir: dir, Verb: "use", Reasons: ownership(fi)}
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	_, err = f.Readdirnames(1)
	_ = f.Close()
	if !errors.Is(err, io.EOF) {
		return &UnsafeStateDirError{Dir: dir, Verb: "use", Reasons: []string{
			fmt.Sprintf("not empty and not created by cdplane sim (no marker %s, no %s): choose another --state-dir", markerFile, stateFile)}}
	}
	// An empty directory of the user's, perhaps made by hand for --state-dir.
	if err := os.Chmod(dir, stateDirMode); err != nil {
		return err
	}
	return markStateDir(dir)
}

// markStateDir writes the marker into a directory just created or emptied.
func markStateDir(dir string) error {
	if err := os.Chmod(dir, stateDirMode); err != nil { // whatever the umask left
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, markerFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("marking the state directory: %w", err)
	}
	_, err = fmt.Fprintf(f, "%s\nuid %d, created %s\n", markerHeader, os.Getuid(), time.Now().UTC().Format(time.RFC3339))
	return errors.Join(err, f.Close())
}
