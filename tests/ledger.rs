//! The fleet ledger against a real, private PostgreSQL (SPEC §13).

use polaris::ledger::private::require_or_skip;

#[test]
fn a_private_postgres_starts_stops_and_is_removed() {
    let Some(pg) = require_or_skip("a_private_postgres_starts_stops_and_is_removed") else {
        return;
    };
    let dir = pg.dir().to_path_buf();
    assert!(
        dir.join(".s.PGSQL.5432").exists(),
        "the socket is in the private directory"
    );
    pg.stop().unwrap();
    assert!(!dir.join(".s.PGSQL.5432").exists());
    pg.start_again().unwrap();
    pg.kill().unwrap();
    pg.start_again().unwrap();
    assert!(dir.join(".s.PGSQL.5432").exists());
    drop(pg);
    assert!(!dir.exists(), "dropping the server removes its directory");
}
