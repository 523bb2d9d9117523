package driverroot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
)

// The dynamic loader's cache (/etc/ld.so.cache, written by ldconfig), as glibc lays it out: an
// optional old-format table ("ld.so-1.7.0", 12-byte entries), then the new-format table
// ("glibc-ld.so.cache1.1", 24-byte entries) at the next 8-byte boundary. Entries name a
// library (key) and its path (value) by offsets into a string table that follows them; in the
// new format the offsets count from the new table's first byte. glibc has written the new
// format alone since 2.32; both are read here, little-endian (amd64 and arm64).
const (
	ldCacheOldMagic = "ld.so-1.7.0"
	ldCacheNewMagic = "glibc-ld.so.cache1.1"

	ldCacheOldHeader = 16 // magic (11) padded to 12, nlibs
	ldCacheOldEntry  = 12 // flags, key, value
	ldCacheNewHeader = 48 // magic+version (20), nlibs, len_strings, flags, 3 pad, extension offset, 3 unused
	ldCacheNewEntry  = 24 // flags, key, value, osversion, hwcap (8)

	// Entry flags: the library type in the low byte, the architecture in the next.
	ldCacheELFLibc6   = 0x0003
	ldCacheX8664Lib64 = 0x0300
	ldCacheAArch64    = 0x0a00
)

// LDCacheEntry is one library of a loader cache: its name (soname), its path, and its flags
// (type and architecture).
type LDCacheEntry struct {
	Name, Path string
	Arch       uint32
}

// CacheArch is the flags of this plugin's architecture's libraries.
func CacheArch() uint32 {
	if runtime.GOARCH == "arm64" {
		return ldCacheELFLibc6 | ldCacheAArch64
	}
	return ldCacheELFLibc6 | ldCacheX8664Lib64
}

var errLDCache = errors.New("not a loader cache")

// ParseLDCache reads the entries of a loader cache. Anything out of bounds, or a file that is
// neither format, is an error; a cache is a root's own file and may be truncated or foreign.
func ParseLDCache(data []byte) ([]LDCacheEntry, error) {
	newStart := 0
	if bytes.HasPrefix(data, []byte(ldCacheOldMagic)) {
		if len(data) < ldCacheOldHeader {
			return nil, fmt.Errorf("%w: old-format header truncated", errLDCache)
		}
		n := uint64(binary.LittleEndian.Uint32(data[12:16]))
		end := uint64(ldCacheOldHeader) + n*ldCacheOldEntry
		if end > uint64(len(data)) {
			return nil, fmt.Errorf("%w: %d old-format entries do not fit in %d bytes", errLDCache, n, len(data))
		}
		newStart = int((end + 7) &^ 7)
		if newStart >= len(data) {
			return nil, fmt.Errorf("%w: only the old format, which names no architecture", errLDCache)
		}
	}
	table := data[newStart:]
	if !bytes.HasPrefix(table, []byte(ldCacheNewMagic)) {
		return nil, fmt.Errorf("%w: no %q table", errLDCache, ldCacheNewMagic)
	}
	if len(table) < ldCacheNewHeader {
		return nil, fmt.Errorf("%w: header truncated", errLDCache)
	}
	n := uint64(binary.LittleEndian.Uint32(table[20:24]))
	if uint64(ldCacheNewHeader)+n*ldCacheNewEntry > uint64(len(table)) {
		return nil, fmt.Errorf("%w: %d entries do not fit in %d bytes", errLDCache, n, len(table))
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(table)) {
			return "", fmt.Errorf("%w: string offset %d past the end", errLDCache, off)
		}
		s := table[off:]
		end := bytes.IndexByte(s, 0)
		if end < 0 {
			return "", fmt.Errorf("%w: unterminated string at %d", errLDCache, off)
		}
		return string(s[:end]), nil
	}
	entries := make([]LDCacheEntry, 0, n)
	for i := range n {
		e := table[ldCacheNewHeader+i*ldCacheNewEntry:]
		name, err := str(binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, err
		}
		p, err := str(binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, err
		}
		entries = append(entries, LDCacheEntry{Name: name, Path: p, Arch: binary.LittleEndian.Uint32(e[0:4])})
	}
	return entries, nil
}
