package imagebuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sum = "ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf"

func TestParseLock(t *testing.T) {
	cases := map[string]struct {
		lock    string
		want    []Package
		wantErr string
	}{
		"packages and comments": {
			lock: "# header\n\nlibc6 2.36-9+deb12u14 amd64 " + sum + " # why\nnetbase 6.4 all " + strings.ToUpper(sum) + "\n",
			want: []Package{{"libc6", "2.36-9+deb12u14", "amd64", sum}, {"netbase", "6.4", "all", sum}},
		},
		"empty":         {lock: "# nothing\n", wantErr: "no packages"},
		"missing field": {lock: "libc6 2.36 amd64\n", wantErr: "line 1: want"},
		"not a sha256":  {lock: "libc6 2.36 amd64 abc\n", wantErr: "is not a SHA256"},
		"per architecture": {
			lock: "libc6 2.36 amd64 " + sum + "\nlibc6 2.36 arm64 " + sum + "\n",
			want: []Package{{"libc6", "2.36", "amd64", sum}, {"libc6", "2.36", "arm64", sum}},
		},
		"twice":                {lock: "a 1 all " + sum + "\na 2 all " + sum + "\n", wantErr: "line 2: package a listed twice for all"},
		"twice for an arch":    {lock: "a 1 arm64 " + sum + "\na 2 arm64 " + sum + "\n", wantErr: "line 2: package a listed twice for arm64"},
		"all and an arch":      {lock: "a 1 amd64 " + sum + "\na 1 all " + sum + "\n", wantErr: "line 2: package a is listed both for all architectures and for amd64"},
		"an arch and then all": {lock: "a 1 all " + sum + "\na 1 arm64 " + sum + "\n", wantErr: "both for all architectures and for arm64"},
		"apt version pick":     {lock: "libc6=2 1 amd64 " + sum + "\n", wantErr: "invalid package"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseLock([]byte(tc.lock))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLock() = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseLock() (-want +got):\n%s", diff)
			}
		})
	}
}

// A lock written by FormatLock parses back to the same packages.
func TestFormatLockRoundTrips(t *testing.T) {
	pkgs := []Package{{"libc6", "2.36-9+deb12u14", "amd64", sum}, {"tzdata", "1:2024a", "all", sum}}
	got, err := ParseLock(FormatLock("a header\nover two lines", pkgs))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pkgs, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if f := pkgs[1].FileName(); f != "tzdata_1%3a2024a_all.deb" {
		t.Errorf("FileName() = %q, want apt-get download's name with the epoch escaped", f)
	}
}

// Each platform gets the lock's "all" packages and its own, in the lock's order; a package
// pinned for one architecture only is refused for the other.
func TestForArch(t *testing.T) {
	pkgs := []Package{
		{"libc6", "2.36", "amd64", sum}, {"libc6", "2.36", "arm64", sum},
		{"netbase", "6.4", "all", sum},
		{"libstdc++6", "12", "amd64", sum}, {"libstdc++6", "12", "arm64", sum},
	}
	got, err := ForArch(pkgs, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{{"libc6", "2.36", "arm64", sum}, {"netbase", "6.4", "all", sum}, {"libstdc++6", "12", "arm64", sum}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ForArch(arm64) (-want +got):\n%s", diff)
	}
	if _, err := ForArch(pkgs[:3], "arm64"); err != nil {
		t.Errorf("ForArch(arm64) without the amd64-only tail: %v", err)
	}
	_, err = ForArch(pkgs[:4], "arm64")
	if err == nil || !strings.Contains(err.Error(), "package libstdc++6 is pinned for amd64 but not for arm64") {
		t.Errorf("ForArch(arm64) with libstdc++6 for amd64 only: %v, want an error naming it", err)
	}
}
