-- +goose Up
-- Console sessions are signed cookies; these tables end them before they
-- expire, for every replica: console_revoked_sessions holds the sessions
-- signed out one by one (until they would have expired anyway),
-- console_signouts the time before which every session was signed out
-- ("sign out everywhere"; one row). Neither is keyed by sender: they are
-- small, operator-only tables read by the console, never by ingest.
CREATE TABLE console_revoked_sessions (
    session_id text        NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT console_revoked_sessions_pkey PRIMARY KEY (session_id)
);

CREATE TABLE console_signouts (
    singleton     boolean     NOT NULL DEFAULT true CHECK (singleton),
    issued_before timestamptz NOT NULL,
    CONSTRAINT console_signouts_pkey PRIMARY KEY (singleton)
);

-- +goose Down
DROP TABLE console_signouts;
DROP TABLE console_revoked_sessions;
