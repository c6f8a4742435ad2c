-- +goose Up
-- target_rates holds, per target with a rate (hookgate.yaml's `rate:`),
-- the state that the processes forwarding to it share it by: tat, when
-- the target's next forward conforms to the rate (the generic cell rate
-- algorithm's theoretical arrival time), and tail, the turn given to the
-- last forward put back for want of one, so that those put back come back
-- one after the other at about the rate rather than all at once. One row
-- per target, updated once per attempt of a limited target's forward
-- (take_rate_turn). UNLOGGED: after a database crash the table is empty
-- and each target starts again with its burst.
CREATE UNLOGGED TABLE target_rates (
    sender text        NOT NULL,
    target text        NOT NULL,
    tat    timestamptz NOT NULL,
    tail   timestamptz NOT NULL,
    CONSTRAINT target_rates_pkey PRIMARY KEY (sender, target)
);

-- take_rate_turn takes a turn of a target's rate for one forward, in one
-- round trip, with the target's row locked (made on first use: that
-- forward goes at once) and the clock read once it is: a clock read before
-- a wait for the lock would be stale. in_interval is the rate's interval,
-- in_tolerance how far ahead of the rate a burst goes ((burst - 1)
-- intervals), in_ahead how far ahead a turn may be granted (the worker
-- waits for it), in_max_wait the longest wait given to a forward put back.
-- A forward conforms when tat is within now + in_tolerance + in_ahead: it
-- is granted the turn tat - in_tolerance (now at the earliest), and tat
-- moves one interval on. One that does not is put back: its turn is an
-- interval after the last one put back, no sooner than tat allows one, no
-- later than in_max_wait from now. A tat further ahead than the rate
-- allows (a rate made faster by a reload) counts as that far. It returns
-- whether the turn is granted, the turn, and the seconds until it.
-- +goose StatementBegin
CREATE FUNCTION take_rate_turn(
    in_sender text, in_target text,
    in_interval interval, in_tolerance interval, in_ahead interval, in_max_wait interval,
    OUT granted boolean, OUT turn timestamptz, OUT wait_seconds float8)
LANGUAGE plpgsql AS $$
DECLARE
    r target_rates;
    v_now timestamptz;
    v_tat timestamptz;
BEGIN
    SELECT * INTO r FROM target_rates WHERE sender = in_sender AND target = in_target FOR UPDATE;
    IF NOT FOUND THEN
        v_now := clock_timestamp();
        INSERT INTO target_rates (sender, target, tat, tail)
        VALUES (in_sender, in_target, v_now + in_interval, v_now)
        ON CONFLICT (sender, target) DO NOTHING;
        IF FOUND THEN
            granted := true;
            turn := v_now;
            wait_seconds := 0;
            RETURN;
        END IF;
        -- Another forward made the row first.
        SELECT * INTO STRICT r FROM target_rates WHERE sender = in_sender AND target = in_target FOR UPDATE;
    END IF;
    v_now := clock_timestamp();
    v_tat := least(r.tat, v_now + in_interval + in_tolerance + in_ahead);
    IF v_tat <= v_now + in_tolerance + in_ahead THEN
        granted := true;
        turn := greatest(v_tat - in_tolerance, v_now);
        UPDATE target_rates SET tat = greatest(v_tat, v_now) + in_interval
        WHERE sender = in_sender AND target = in_target;
    ELSE
        granted := false;
        turn := least(greatest(r.tail + in_interval, v_tat - in_tolerance), v_now + in_max_wait);
        UPDATE target_rates SET tat = v_tat, tail = turn
        WHERE sender = in_sender AND target = in_target;
    END IF;
    wait_seconds := extract(epoch FROM turn - v_now);
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS take_rate_turn(text, text, interval, interval, interval, interval);
DROP TABLE IF EXISTS target_rates;
