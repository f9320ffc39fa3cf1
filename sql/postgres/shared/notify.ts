/**
 * Notifications (NOTIFY), sent after the commit they announce.
 */

/**
 * Notifications after a commit (never inside a writing transaction, see COMMIT_OWNED).
 * Params: $1 [{channel, payload}].
 */
export const NOTIFY = `
SELECT pg_notify(n.channel, n.payload) FROM jsonb_to_recordset($1::jsonb) AS n(channel text, payload text)`;
