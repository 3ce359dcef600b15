package queue

import (
	"fmt"
	"syscall"
)

// networkFileSystems are the statfs(2) magic numbers of the network file
// systems the state directory refuses: flock(2) there is emulated or
// per-client, so the append lock and the worker, sync and cron locks would
// not exclude another host's processes; fsync's guarantees depend on the
// server; and SQLite's WAL (registry.db) needs shared memory that a network
// file system does not have.
var networkFileSystems = map[int64]string{
	0x6969:     "NFS",
	0x517b:     "SMB",
	0xff534d42: "CIFS",
	0xfe534d42: "SMB2",
}

// CheckLocal refuses a state directory on a network file system (NFS,
// SMB/CIFS), naming it; any other file system, or one statfs cannot
// describe, is accepted.
func CheckLocal(dir string) error {
	return checkLocal(dir, syscall.Statfs)
}

func checkLocal(dir string, statfs func(string, *syscall.Statfs_t) error) error {
	var st syscall.Statfs_t
	if err := statfs(dir, &st); err != nil {
		return nil // nothing to judge by; the files will fail on their own
	}
	if name, ok := networkFileSystems[int64(st.Type)]; ok {
		return fmt.Errorf("the state directory %s is on %s, a network file system: its file locks and fsync cannot be trusted and SQLite's WAL does not work there; put --db on a local disk", dir, name)
	}
	return nil
}
