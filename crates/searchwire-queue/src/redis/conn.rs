//! Opening one connection to one Redis server, and reading its `ROLE`: what the link and
//! the Cluster's slot resolution share.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, ConnectionInfo, Value};

use super::config::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

fn manager_config(retries: usize) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT)
        .set_number_of_retries(retries)
        .set_factor(100)
        .set_max_delay(1000)
}

pub(super) async fn manager(
    info: ConnectionInfo,
    retries: usize,
) -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(info)?;
    match tokio::time::timeout(
        CONNECT_TIMEOUT * 2,
        ConnectionManager::new_with_config(client, manager_config(retries)),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {:?}", CONNECT_TIMEOUT * 2),
        ))),
    }
}

pub(super) fn show(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
        other => other.to_string(),
    }
}

/// Whether the server's `ROLE` answer says it is a primary.
pub(super) fn is_master(role: &Value) -> bool {
    match role {
        Value::Array(items) => {
            matches!(
                items.first(),
                Some(Value::BulkString(b)) if b.as_slice() == b"master"
            ) || matches!(items.first(), Some(Value::SimpleString(s)) if s == "master")
        }
        _ => false,
    }
}

/// Connects to `named`, the primary that `asked` (a Sentinel or a Cluster node, `HOST:PORT`)
/// names, with the credentials of `info`, and keeps the connection only once the server
/// answers `ROLE` with `master` (a Sentinel or a slot map may still name a demoted node).
/// Returns the connection and the primary's address, or why it is not usable, naming both.
pub(super) async fn connect_primary(
    info: &ConnectionInfo,
    asked: &str,
    named: (String, u16),
) -> Result<(ConnectionManager, String), String> {
    let shown = format!("{}:{}", named.0, named.1);
    let mut primary = info.clone();
    primary.addr = ConnectionAddr::Tcp(named.0, named.1);
    let mut conn = manager(primary, 0)
        .await
        .map_err(|e| format!("{asked} names {shown}, which does not answer: {e}"))?;
    match redis::cmd("ROLE").query_async::<Value>(&mut conn).await {
        Ok(role) if is_master(&role) => Ok((conn, shown)),
        Ok(_) => Err(format!(
            "{asked} names {shown}, which is not a primary (a failover is under way)"
        )),
        Err(e) => Err(format!("{asked} names {shown}; its ROLE failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_answers_are_read() {
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(1)]);
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }
}
