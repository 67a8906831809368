package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// A Java server spends most of its start loading and verifying classes
// from jars: a Kafka node took 3.5 to 4.9 s to start here, 1.6 to 1.8 s
// with its classes mapped from a class data archive (AppCDS). The
// harness makes one archive per server and version the first time it
// starts one on a machine, by a training run that dumps the classes it
// loaded when it exits (-XX:ArchiveClassesAtExit, JDK 13 and later), and
// keeps it in the user's cache directory, as Go keeps its build cache.
// The archive is keyed by the JVM and the jars it holds classes of, so a
// new JDK or new jars make a new one. Without one (no cache directory,
// another process training, a JVM that cannot dump) the server starts as
// before: an archive changes how fast classes load, nothing else.

// archives are this process's archives by key: the flag that maps one,
// or "" after a training run failed, which is not tried again.
var archives struct {
	sync.Mutex
	flags map[string]string
}

// classArchive returns the flag that maps the class data archive of the
// server name (a name and version, such as "kafka-4.4.0") run by java from
// the jars of inputs (folders or files), with classpath the JVM arguments
// that name them (-cp or -jar), made first by train when the cache has
// none: train runs the server with the flag it is given, waits until it
// has started and stops it cleanly, so that the JVM writes the archive.
// It returns "" when there is no archive to use.
func classArchive(name, java string, inputs, classpath []string, train func(dump string) error) string {
	key, err := archiveKey(java, inputs)
	if err != nil {
		return ""
	}
	archives.Lock()
	defer archives.Unlock()
	if flag, ok := archives.flags[key]; ok {
		return flag
	}
	flag, final := makeArchive(name, key, train, func(flag string) error {
		// -Xshare:on fails where the archive cannot be mapped.
		out, err := exec.Command(java, slices.Concat([]string{"-Xshare:on", flag}, classpath, []string{"-version"})...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	if final {
		if archives.flags == nil {
			archives.flags = make(map[string]string)
		}
		archives.flags[key] = flag
	}
	return flag
}

// makeArchive finds or makes the archive of key, which check must find
// usable. final is false when another process is making it: a later
// start may find it.
func makeArchive(name, key string, train func(dump string) error, check func(flag string) error) (flag string, final bool) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", true
	}
	dir := filepath.Join(cache, "walstream-testenv", "jvm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", true
	}
	path := filepath.Join(dir, name+"-"+key[:16]+".jsa")
	flag = "-XX:SharedArchiveFile=" + path
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		return flag, true
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", true
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return "", false
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		return flag, true
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := train("-XX:ArchiveClassesAtExit=" + tmp); err != nil {
		os.Remove(tmp)
		return "", true
	}
	if err := check("-XX:SharedArchiveFile=" + tmp); err != nil {
		os.Remove(tmp)
		return "", true
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", true
	}
	// Archives of an earlier JDK or earlier jars are of no more use.
	old, _ := filepath.Glob(filepath.Join(dir, name+"-*.jsa"))
	for _, o := range old {
		if o != path {
			os.Remove(o)
			os.Remove(o + ".lock")
		}
	}
	return flag, true
}

// archiveKey is a digest of what an archive is valid for: the JVM (its
// launcher, library and modules) and each jar of inputs, by name, size and
// modification time.
func archiveKey(java string, inputs []string) (string, error) {
	bin, err := filepath.EvalSymlinks(java)
	if err != nil {
		return "", fmt.Errorf("finding the JVM of %s: %w", java, err)
	}
	home := filepath.Dir(filepath.Dir(bin))
	h := sha256.New()
	files := []string{bin, filepath.Join(home, "lib", "server", "libjvm.so"), filepath.Join(home, "lib", "modules")}
	for _, in := range inputs {
		fi, err := os.Stat(in)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", in, err)
		}
		if !fi.IsDir() {
			files = append(files, in)
			continue
		}
		entries, err := os.ReadDir(in)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", in, err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".jar") {
				files = append(files, filepath.Join(in, e.Name()))
			}
		}
	}
	slices.Sort(files[3:])
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", f, err)
		}
		fmt.Fprintf(h, "%s %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// withoutDump is a JVM command line without the flag that writes an
// archive at exit, for a tool run during a training run.
func withoutDump(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "-XX:ArchiveClassesAtExit=") })
}
