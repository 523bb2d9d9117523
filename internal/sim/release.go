package sim

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"cdplane/internal/sim/kubelet"
)

// ImagesDir is the directory of the images loaded into the simulated cluster (LoadImage): its
// nodes run an image found there from its own binaries, whatever the tag, as a node's
// container runtime runs what was pulled (kubelet.ProcessRunner.Images).
func (st *State) ImagesDir() string {
	return filepath.Join(filepath.Dir(st.BinDir), "images")
}

// LoadImage makes image (repository[:tag], "latest" without a tag) run the binaries in dir on
// every simulated node, as `kind load` puts an image on a kind cluster's nodes: the simulated
// kubelets look it up at each container start, so a loaded image is there for the next pod at
// once. dir is what the sim builds for its own image (see build): cdplane, cdplane-controller,
// cdplane-daemon and the kubelet plugin. Loading an image again replaces it whole.
func (st *State) LoadImage(image, dir string) error {
	if image == "" || strings.ContainsAny(image, " \t\n") {
		return fmt.Errorf("image %q is not an image reference", image)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the binaries of image %s: %w", image, err)
	}
	dest := kubelet.LoadedImageDir(st.ImagesDir(), image)
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	// Copied into a directory beside the destination, which the destination, a symbolic link,
	// is then swapped to in one rename: a container starting meanwhile runs the old image or the
	// new one, never half of one, and never the sim's own build for want of either.
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".load-")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	copied := 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(dir, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return fmt.Errorf("loading image %s: %w", image, err)
		}
		copied++
	}
	if copied == 0 {
		return fmt.Errorf("image %s: %s holds no binaries", image, dir)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	previous, _ := os.Readlink(dest) // "" when dest is not a link yet
	link := tmp + ".link"
	if err := os.Symlink(filepath.Base(tmp), link); err != nil {
		return err
	}
	if err := os.Rename(link, dest); err != nil {
		_ = os.Remove(link)
		return err
	}
	done = true
	if previous != "" {
		return os.RemoveAll(filepath.Join(filepath.Dir(dest), previous))
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Release is a released version of cdplane, as the repository records it.
type Release struct {
	Version string
	Commit  string
}

// PreviousRelease reads the release before this one from hack/releases/previous in repo.
func PreviousRelease(repo string) (Release, error) {
	path := filepath.Join(repo, "hack", "releases", "previous")
	f, err := os.Open(path)
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	var r Release
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return Release{}, fmt.Errorf("%s: %q is not key=value", path, line)
		case k == "version":
			r.Version = v
		case k == "commit":
			r.Commit = v
		default:
			return Release{}, fmt.Errorf("%s: unknown key %q", path, k)
		}
	}
	if err := sc.Err(); err != nil {
		return Release{}, err
	}
	if r.Version == "" || len(r.Commit) != 40 {
		return Release{}, fmt.Errorf("%s: want version=X.Y.Z and commit=<40 hex digits>, got %+v", path, r)
	}
	return r, nil
}

// BuildRelease builds release r from the history of the git repository repo: its CLI and the
// binaries of its image as the simulator runs them (what build makes for the working tree),
// into a directory of the cache (${CDPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/cdplane}/
// releases/<version>-<commit>), reused when complete. It returns that directory; its cdplane
// is the release's CLI, which carries the release's charts.
func BuildRelease(ctx context.Context, repo string, r Release, out io.Writer) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "releases", r.Version+"-"+r.Commit[:12])
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	check := exec.CommandContext(ctx, "git", "-C", repo, "cat-file", "-e", r.Commit+"^{commit}")
	if msg, err := check.CombinedOutput(); err != nil {
		return "", fmt.Errorf("release %s (commit %s) is not in the history of %s (%w: %s): a shallow clone? git fetch --unshallow, or fetch tag v%s",
			r.Version, r.Commit[:12], repo, err, strings.TrimSpace(string(msg)), r.Version)
	}
	src, err := os.MkdirTemp("", "cdplane-release-src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	fmt.Fprintf(out, "Extracting release %s (commit %s) from the repository's history\n", r.Version, r.Commit[:12])
	if err := gitArchive(ctx, repo, r.Commit, src); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "Building release %s's binaries into %s\n", r.Version, dir)
	if err := buildImageBinaries(ctx, src, dir, r.Commit[:12], out); err != nil {
		return "", fmt.Errorf("building release %s: %w", r.Version, err)
	}
	return dir, os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}

// cacheDir is the project's cache directory, as hack/k8s-bins.sh finds it.
func cacheDir() (string, error) {
	if d := os.Getenv("CDPLANE_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "cdplane"), nil
}

// gitArchive writes the tree of commit into dir.
func gitArchive(ctx context.Context, repo, commit, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	extractErr := extractTar(stdout, dir)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	return extractErr
}

func extractTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("archive entry %q is outside the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
	}
}
