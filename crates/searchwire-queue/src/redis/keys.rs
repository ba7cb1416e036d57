//! The keys of one queue's layout (see the table in the [module documentation](super)).

pub(super) struct Keys {
    pub(super) all: Vec<String>,
}

impl Keys {
    /// In the order the scripts name them (`scripts::COMMON`, `MIGRATE`).
    pub(super) fn new(stream: &str) -> Self {
        let k = |suffix: &str| format!("{stream}:{suffix}");
        Keys {
            all: vec![
                stream.to_owned(),
                k("delayed"),
                k("ready"),
                k("msg"),
                k("hashes"),
                k("held"),
                k("calls"),
                k("entries"),
                k("dead"),
                k("dead-ids"),
                k("arrival"),
                k("lease-seq"),
                k("layout"),
                // Layout 1's, read once by the migration.
                k("meta"),
                k("inflight"),
                k("leases"),
                // Read by `scripts::APPEND_SMALL` as KEYS[17].
                k("seq"),
            ],
        }
    }

    pub(super) fn seq(&self) -> &str {
        &self.all[16]
    }

    /// The key of an append's receipt (`S:receipt:TOKEN:CHUNK`).
    pub(super) fn receipt(&self, token: &str, chunk: usize) -> String {
        format!("{}:receipt:{token}:{chunk}", self.all[0])
    }

    pub(super) fn msg(&self) -> &str {
        &self.all[3]
    }

    pub(super) fn arrival(&self) -> &str {
        &self.all[10]
    }

    pub(super) fn ready(&self) -> &str {
        &self.all[2]
    }

    pub(super) fn delayed(&self) -> &str {
        &self.all[1]
    }
}
