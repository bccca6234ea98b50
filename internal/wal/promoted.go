package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// ErrPromotedElsewhere means another Database was promoted from the
// archive: a PromotionClaim not the caller's is stored there.
var ErrPromotedElsewhere = errors.New("another Database was promoted from this WAL archive")

func promotedKey(prefix string) string { return prefix + instanceapi.PromotedKey }

// ClaimPromotion records, in the archive under prefix, that c's Database
// is promoted from it. The write succeeds only where no claim is (a
// conditional write), so of two Databases promoted from one archive at
// once, one wins; the other, and any later one, gets ErrPromotedElsewhere.
// A claim by c's Database already is success: a promotion tried again.
func ClaimPromotion(ctx context.Context, st backup.Storage, prefix string, c instanceapi.PromotionClaim) error {
	return ClaimKey(ctx, st, prefix, instanceapi.PromotedKey, c)
}

// ClaimKey is ClaimPromotion for the record key under prefix (a demotion
// token's: instanceapi.DemotionToken.DemotionKey).
func ClaimKey(ctx context.Context, st backup.Storage, prefix, key string, c instanceapi.PromotionClaim) error {
	if c.DatabaseUID == "" {
		return errors.New("a promotion claim needs the Database's UID")
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	// A claim found and gone before it was read (deleted by hand): try again.
	for range 3 {
		err = st.Create(ctx, prefix+key, b)
		if !errors.Is(err, backup.ErrExists) {
			return err
		}
		have, err := claimOf(ctx, st, prefix+key)
		switch {
		case err != nil:
			return err
		case have == nil:
			continue
		case have.DatabaseUID == c.DatabaseUID:
			return nil
		default:
			return fmt.Errorf("%w: %s claimed it at %s", ErrPromotedElsewhere, have.Database, have.Time.UTC().Format(time.RFC3339))
		}
	}
	return fmt.Errorf("the claim at %s came and went three times", prefix+key)
}

// PromotionOf reads the claim under prefix: nil when there is none.
func PromotionOf(ctx context.Context, st backup.Storage, prefix string) (*instanceapi.PromotionClaim, error) {
	return claimOf(ctx, st, promotedKey(prefix))
}

// claimOf reads the claim at key: nil when there is none.
func claimOf(ctx context.Context, st backup.Storage, key string) (*instanceapi.PromotionClaim, error) {
	data, err := fetchPlain(ctx, st, key)
	if errors.Is(err, backup.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", key, err)
	}
	var c instanceapi.PromotionClaim
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s is not valid: %w", key, err)
	}
	return &c, nil
}

// ReleaseDemoted removes, from the archive under prefix, the claim uid's
// Database made on it as it was demoted (instanceapi.DemotedClaimUID):
// once that Database is promoted again, a replica of it may claim its
// archive as of any primary's. Any other claim stays; none is success.
func ReleaseDemoted(ctx context.Context, st backup.Storage, prefix, uid string) error {
	have, err := PromotionOf(ctx, st, prefix)
	if err != nil || have == nil || have.DatabaseUID != instanceapi.DemotedClaimUID(uid) {
		return err
	}
	// Claims are only ever created, never replaced: the one read is
	// still the one stored.
	return st.Delete(ctx, promotedKey(prefix))
}
