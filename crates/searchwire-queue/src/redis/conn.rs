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
