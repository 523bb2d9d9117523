package imagebuild

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image describes the image's configuration.
type Image struct {
	// Name is the image's name in the archive's index and docker manifest, e.g.
	// "docker.io/library/cdplane:0.1.0" (what the chart's default "cdplane:<appVersion>" means).
	Name, Tag string
	Version   string
	Commit    string
	Arch      string
	Created   time.Time
	// Layers are gzip-compressed layer tars, base first.
	Layers []string
	// LayerComments say what made each layer, for its history.
	LayerComments []string
}

// newImage assembles the OCI image (OCI media types) from its layers and configuration.
func newImage(im Image) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: im.Created.UTC()}
	adds := make([]mutate.Addendum, 0, len(im.Layers))
	for i, p := range im.Layers {
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{Created: created, CreatedBy: im.LayerComments[i]}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created, cfg.OS, cfg.Architecture = created, "linux", im.Arch
	cfg.Config = v1.Config{
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/" + caBundle,
		},
		// root by default: the kubelet plugin (privileged, host paths) and the IMEX daemons need
		// it; the chart runs the controller as nonroot (65532).
		User:       "0",
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "cdplane",
			"org.opencontainers.image.version":  im.Version,
			"org.opencontainers.image.revision": im.Commit,
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// newIndex is the OCI image index of imgs, one per platform (the platform from each one's
// configuration), in their order.
func newIndex(imgs []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(imgs))
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// WriteArchive writes the multi-platform image idx as one tar that is both an OCI image layout
// (oci-layout, blobs/sha256/…, and index.json naming idx: `ctr images import`, `kind load
// image-archive`, skopeo oci-archive:) and a docker-load archive (manifest.json naming the blobs
// of idx's first image, tagged: `docker load`), as `docker save` writes a multi-platform image
// since Docker 25. index.json holds one descriptor, of the index, named name and tag, so that
// ctr names one image, of every platform, and unpacks the host's. Entries are in a fixed order
// with fixed times: the same images give the same bytes. It returns idx's digest, the image's
// digest.
func WriteArchive(path string, idx v1.ImageIndex, name, tag string) (v1.Hash, error) {
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	rawIndex, err := idx.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	if len(im.Manifests) == 0 {
		return v1.Hash{}, fmt.Errorf("the index holds no image")
	}
	top := v1.IndexManifest{
		SchemaVersion: 2, MediaType: types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIImageIndex, Digest: digest, Size: int64(len(rawIndex)),
			Annotations: map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return v1.Hash{}, err
	}

	f, err := os.Create(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	written := map[v1.Hash]bool{}
	add := func(name string, size int64, body io.Reader) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.Copy(tw, body)
		if err == nil && n != size {
			err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
		}
		return err
	}
	addBytes := func(name string, b []byte) error { return add(name, int64(len(b)), bytesReader(b)) }
	addBlob := func(h v1.Hash, b []byte) error {
		if written[h] {
			return nil
		}
		written[h] = true
		return addBytes(blobPath(h), b)
	}

	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/sha256/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
		return v1.Hash{}, err
	}
	var docker []tarball.Descriptor
	for i, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return v1.Hash{}, err
		}
		manifest, err := img.RawManifest()
		if err != nil {
			return v1.Hash{}, err
		}
		cfgName, err := img.ConfigName()
		if err != nil {
			return v1.Hash{}, err
		}
		config, err := img.RawConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		layers, err := img.Layers()
		if err != nil {
			return v1.Hash{}, err
		}
		var layerPaths []string
		for _, l := range layers {
			ld, err := l.Digest()
			if err != nil {
				return v1.Hash{}, err
			}
			layerPaths = append(layerPaths, blobPath(ld))
			if written[ld] {
				continue
			}
			written[ld] = true
			size, err := l.Size()
			if err != nil {
				return v1.Hash{}, err
			}
			rc, err := l.Compressed()
			if err != nil {
				return v1.Hash{}, err
			}
			err = add(blobPath(ld), size, rc)
			rc.Close()
			if err != nil {
				return v1.Hash{}, err
			}
		}
		if err := addBlob(cfgName, config); err != nil {
			return v1.Hash{}, err
		}
		if err := addBlob(d.Digest, manifest); err != nil {
			return v1.Hash{}, err
		}
		if i == 0 {
			docker = append(docker, tarball.Descriptor{Config: blobPath(cfgName), RepoTags: []string{dockerRef(name)}, Layers: layerPaths})
		}
	}
	if err := addBlob(digest, rawIndex); err != nil {
		return v1.Hash{}, err
	}
	if err := addBytes("index.json", indexJSON); err != nil {
		return v1.Hash{}, err
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := addBytes("manifest.json", dockerJSON); err != nil {
		return v1.Hash{}, err
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	return digest, f.Close()
}

// ArchivePlatforms reads an archive WriteArchive wrote and returns the platforms of its image,
// "linux/amd64" and so on, in its index's order.
func ArchivePlatforms(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		// Only the JSON documents are kept: index.json and blobs no bigger than an index.
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("%s: index.json does not name one image index", path)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(files[blobPath(top.Manifests[0].Digest)], &idx); err != nil {
		return nil, fmt.Errorf("%s: the image index %s: %w", path, top.Manifests[0].Digest, err)
	}
	var platforms []string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			return nil, fmt.Errorf("%s: manifest %s has no platform", path, m.Digest)
		}
		platforms = append(platforms, m.Platform.String())
	}
	return platforms, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// dockerRef is the short name docker shows for a docker.io/library image.
func dockerRef(name string) string {
	const library = "docker.io/library/"
	if len(name) > len(library) && name[:len(library)] == library {
		return name[len(library):]
	}
	return name
}
