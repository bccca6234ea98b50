package instance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// wantsSlot: the operator lists this replica, so it streams through a slot.
func (m *Manager) wantsSlot() bool {
	r, err := m.cfg.replication()
	return err == nil && slices.Contains(r.Instances, m.cfg.Pod)
}

// errWALGone: the primary removed WAL the replica had not received (its
// slot was invalidated past max_slot_wal_keep_size, or it streamed
// without one), so the data can never catch up by streaming and is cloned
// again.
var errWALGone = errors.New("the primary removed WAL this replica needs: its replication slot was invalidated")

// errWALRemoved: the primary refused to stream from this replica's position
// because it removed that segment, whatever its slot says.
var errWALRemoved = fmt.Errorf("%w (the primary refuses to stream from this replica's position: the segment is removed)", errWALGone)

// slotState reads this replica's slot on the primary: whether it exists,
// and whether the primary invalidated it (no restart LSN: the WAL it
// held is gone).
func slotState(ctx context.Context, conn *pgconn.PgConn, slot string) (exists, lost bool, err error) {
	res, err := conn.Exec(ctx, "READ_REPLICATION_SLOT "+slot).ReadAll()
	if err != nil {
		return false, false, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 2 {
		return false, false, fmt.Errorf("READ_REPLICATION_SLOT answered %d results", len(res))
	}
	row := res[0].Rows[0]
	return row[0] != nil, row[0] != nil && row[1] == nil, nil
}

// reserveSlot creates this replica's slot on the primary over the
// replication protocol before postgres starts, so it streams through it at
// once, even before the primary's manager learns of a new instance, and
// the primary keeps the WAL a clone needs from before it starts. A slot
// the primary invalidated is made again, and the data marked to be cloned
// again (recloneMark). Any other failure is only logged, since the
// primary's manager makes the slot too.
func (m *Manager) reserveSlot(ctx context.Context) error {
	if !m.wantsSlot() || following(m.holderName()) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := m.primaryReplicationConn(ctx)
	if err != nil {
		m.log.Info("Could not reserve a replication slot on the primary yet", "reason", err.Error())
		return nil
	}
	defer func() { _ = conn.Close(context.Background()) }()
	slot := slotName(m.cfg.Pod)
	exists, lost, err := slotState(ctx, conn, slot)
	if err != nil {
		m.log.Info("Could not read this replica's slot on the primary", "slot", slot, "reason", err.Error())
		return nil
	}
	if lost {
		// Recorded first: once the slot is made again nothing else shows
		// that this data cannot catch up. A clone replaces the directory,
		// and the mark with it. (Only a running replica catches up from
		// the WAL archive: see cannotFollow.)
		if err := m.markData(recloneMark, errWALGone); err != nil {
			return err
		}
		return m.remakeSlot(ctx, conn, slot)
	}
	if !exists {
		m.createSlot(ctx, conn, slot)
	}
	return nil
}

// remakeSlot drops this replica's invalidated slot on the primary and
// makes it again.
func (m *Manager) remakeSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if _, err := conn.Exec(ctx, "DROP_REPLICATION_SLOT "+slot).ReadAll(); err != nil {
		return fmt.Errorf("failed to drop the invalidated replication slot %s: %w", slot, err)
	}
	m.log.Info("Dropped this replica's invalidated replication slot on the primary", "slot", slot)
	m.createSlot(ctx, conn, slot)
	return nil
}

// createSlot makes this replica's slot on the primary, reserving WAL at
// once; a failure is only logged, since the primary's manager makes it too.
func (m *Manager) createSlot(ctx context.Context, conn *pgconn.PgConn, slot string) {
	_, err := conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+slot+" PHYSICAL RESERVE_WAL").ReadAll()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		m.log.Info("Reserved a replication slot on the primary", "slot", slot)
	case errors.As(err, &pgErr) && pgErr.Code == "42710": // duplicate_object: the primary's manager made it
	default:
		m.log.Info("Could not reserve a replication slot on the primary", "slot", slot, "reason", err.Error())
	}
}
