package image

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/hack/image/imagebuild"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	goBuild = regexp.MustCompile(`^RUN CGO_ENABLED=([01]) go build .* -o /out/ ((?:\./cmd/[a-z-]+ ?)+)$`)
	copyOut = regexp.MustCompile(`^COPY --from=build ((?:/out/[a-z-]+ )+)/usr/local/bin/$`)
)

// The Dockerfile builds, with the same cgo split as make image, and copies onto PATH exactly the
// commands under cmd/; its final stage is the distroless base with the C++ runtime.
func TestDockerfileMatchesCommands(t *testing.T) {
	repo := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	built := map[string][]string{}
	var copied, froms []string
	for _, line := range strings.Split(string(data), "\n") {
		if m := goBuild.FindStringSubmatch(line); m != nil {
			for _, p := range strings.Fields(m[2]) {
				built[m[1]] = append(built[m[1]], strings.TrimPrefix(p, "./cmd/"))
			}
		}
		if m := copyOut.FindStringSubmatch(line); m != nil {
			for _, p := range strings.Fields(m[1]) {
				copied = append(copied, strings.TrimPrefix(p, "/out/"))
			}
		}
		if strings.HasPrefix(line, "FROM ") {
			froms = append(froms, line)
		}
	}
	cmds, err := imagebuild.Commands(repo)
	if err != nil {
		t.Fatal(err)
	}
	withCgo, static, err := imagebuild.SplitCgo(repo, cmds)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(copied)
	if diff := cmp.Diff(cmds, copied); diff != "" {
		t.Errorf("Dockerfile copies other binaries than cmd/ holds (-cmd/ +Dockerfile):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"1": withCgo, "0": static}, built); diff != "" {
		t.Errorf("Dockerfile builds other binaries, or with another cgo split, than make image (-image +Dockerfile):\n%s", diff)
	}
	// cc: base and the C++ runtime (libstdc++6, libgcc-s1), as make image's base layer has.
	if len(froms) == 0 || !strings.HasPrefix(froms[len(froms)-1], "FROM gcr.io/distroless/cc-debian12") {
		t.Errorf("the final stage is %q, want distroless cc-debian12", froms)
	}
}
