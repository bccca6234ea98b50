package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// identityFile records in the data directory which Database made it and
// how. pg_basebackup copies it to replicas with everything else.
const identityFile = "daytwo-identity.json"

// Identity is the content of identityFile.
type Identity struct {
	// DatabaseUID is the metadata.uid of the Database the data belongs to.
	DatabaseUID string `json:"databaseUID"`
	// Bootstrap is how the data was first made (BootstrapInitDB or
	// BootstrapFromBackup), kept when another Database re-uses the data.
	Bootstrap string `json:"bootstrap"`
	// Created is when the bootstrap completed.
	Created time.Time `json:"created"`
	// PreviousUIDs are the Databases that ran on this data before, oldest first.
	PreviousUIDs []string `json:"previousUIDs,omitempty"`
}

func readIdentity(dir string) (Identity, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("failed to read %s: %w", identityFile, err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, false, fmt.Errorf("%s is not valid: %w", identityFile, err)
	}
	return id, true, nil
}

// writeIdentity replaces identityFile durably: a temporary file, fsync, rename.
func writeIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, identityFile+".tmp")
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, identityFile)); err != nil {
		return fmt.Errorf("failed to write %s: %w", identityFile, err)
	}
	return syncDir(dir)
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("failed to write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", dir, err)
	}
	return nil
}

// errReclone says a replica holds another Database's data: it is rebuilt
// from the primary, which is always possible for a replica.
var errReclone = errors.New("the replica's data belongs to another Database")

// dataConflict is the refusal to serve data this Database did not make.
type dataConflict struct{ msg string }

func (e dataConflict) Error() string { return instanceapi.TerminationDataConflict + ": " + e.msg }

// checkIdentity decides whether this Database may run on the data
// directory it found. The rule:
//   - data this Database made runs;
//   - data without an identity was not made by a daytwo bootstrap (every
//     bootstrap writes one before the data is moved into place): it runs
//     only when the user asks for it with ReuseData, as data another
//     Database made;
//   - data another Database made runs only when both were made by initdb
//     (deletionPolicy Retain's promise: a Database created again with the
//     same name continues on the kept data), or when the user asks for it
//     with ReuseData; anything else, above all a spec that asks for a
//     restore, is refused, because the restore would silently not happen;
//   - a replica with another Database's data is cloned again instead.
//
// Data that may run is stamped with this Database's UID.
func (m *Manager) checkIdentity() error {
	if m.cfg.DatabaseUID == "" {
		return nil
	}
	id, found, err := readIdentity(m.cfg.PGData)
	if err != nil {
		return err
	}
	switch {
	case !found && m.role() == instanceapi.RoleReplica:
		return errReclone
	case !found && m.cfg.ReuseData:
		m.log.Info("Re-using a data directory daytwo did not make, as asked", "bootstrap", m.cfg.BootstrapSource)
		id = Identity{Bootstrap: m.cfg.BootstrapSource, Created: time.Now().UTC()}
	case !found:
		return dataConflict{"the volume holds a data directory no daytwo bootstrap made (it has no " + identityFile + "); " +
			"delete the PersistentVolumeClaim to bootstrap as the spec says, or set the annotation " +
			"daytwo.dev/reuse-data=true on the Database to run on it"}
	case id.DatabaseUID == m.cfg.DatabaseUID:
		return nil
	case m.role() == instanceapi.RoleReplica:
		return errReclone
	case m.cfg.ReuseData:
		m.log.Info("Re-using data another Database made, as asked", "previousUID", id.DatabaseUID, "bootstrap", id.Bootstrap)
	case id.Bootstrap == instanceapi.BootstrapInitDB && m.cfg.BootstrapSource == instanceapi.BootstrapInitDB:
		m.log.Info("Continuing on retained data", "previousUID", id.DatabaseUID)
	default:
		return dataConflict{fmt.Sprintf("the volume holds data of an earlier Database (uid %s, bootstrap %s, made %s) "+
			"and this Database's spec asks for bootstrap %s, which would not happen on it; "+
			"delete the PersistentVolumeClaim to bootstrap as the spec says, or set the annotation "+
			"daytwo.dev/reuse-data=true on the Database to run on the kept data",
			id.DatabaseUID, id.Bootstrap, id.Created.Format(time.RFC3339), m.cfg.BootstrapSource)}
	}
	if id.DatabaseUID != "" {
		id.PreviousUIDs = append(slices.Clone(id.PreviousUIDs), id.DatabaseUID)
	}
	id.DatabaseUID = m.cfg.DatabaseUID
	return writeIdentity(m.cfg.PGData, id)
}
