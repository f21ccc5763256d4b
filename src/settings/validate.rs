//! Checking the settings as a whole, beyond each one's own bound: what
//! depends on several (authentication and exposure, TLS, gossip), with a
//! message that says which setting to change.

use super::table::Settings;

impl Settings {
    /// Checks every bound, then what no single setting can say.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.check_bounds().map_err(anyhow::Error::msg)?;
        if let (Some(min_isr), Some(factor)) = (self.kafka_min_insync_replicas, self.kafka_replication_factor) {
            anyhow::ensure!(min_isr <= factor, "kafka_min_insync_replicas must be at most kafka_replication_factor ({factor})");
        }
        anyhow::ensure!(
            self.gossip_advertise.is_none() || self.gossip.is_some(),
            "gossip_advertise is the address peers send gossip to, and needs gossip set"
        );
        self.gossip_advertise_addr()?;
        for (region, address) in &self.advertise_api_for {
            let port = address.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
            anyhow::ensure!(
                !region.is_empty() && port.and_then(|p| p.parse::<u16>().ok()).is_some_and(|p| p != 0),
                "advertise_api_for takes REGION=HOST:PORT (a region, and a host with a port from 1 to 65535), got {region:?}={address:?}"
            );
        }
        anyhow::ensure!(
            !(self.kafka_membership == "group" && self.gossip.is_none()),
            "kafka_membership = group needs gossip: a node that shares partitions must be able to forward \
             requests for the ones it does not hold (set gossip, or use kafka_membership = assign)"
        );
        anyhow::ensure!(
            self.log == "embedded" || self.log.strip_prefix("kafka://").is_some_and(|hosts| !hosts.is_empty()),
            "log must be `embedded` or kafka://HOST:PORT[,HOST:PORT], got {:?}",
            self.log
        );
        self.namespaces_to_create()?;
        self.accepted_losses()?;
        self.accepted_journal_losses()?;
        self.check_exposure()?;
        self.cors_origins()?;
        anyhow::ensure!(
            !(self.auth && self.gossip.is_some() && self.cluster_key_file.is_none() && !self.insecure),
            "auth with gossip needs cluster_key_file: unauthenticated gossip would let anyone who reaches the \
             gossip port join the cluster view and be sent forwarded requests (or pass --insecure)"
        );
        anyhow::ensure!(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "tls_cert_file and tls_key_file go together: give both, or neither"
        );
        anyhow::ensure!(
            self.tls_client_ca_file.is_none() || self.tls_cert_file.is_some(),
            "tls_client_ca_file (mTLS) needs TLS: give tls_cert_file and tls_key_file too"
        );
        Ok(())
    }

    /// `cors_origins`, checked: `*` alone, or origins as browsers send them
    /// (`Origin` carries no path, no trailing `/`, no default-port variance).
    pub fn cors_origins(&self) -> anyhow::Result<Vec<String>> {
        if self.cors_origins.iter().any(|o| o == "*") {
            anyhow::ensure!(self.cors_origins.len() == 1, "cors_origins: `*` allows every origin and goes alone, got {:?}", self.cors_origins);
            return Ok(self.cors_origins.clone());
        }
        for origin in &self.cors_origins {
            let authority = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            let valid = authority.is_some_and(|a| {
                !a.is_empty() && !a.contains(['/', '?', '#', '@', ' ']) && a.bytes().all(|b| b.is_ascii_graphic()) && a == a.to_ascii_lowercase()
            });
            // A browser never sends the scheme's default port: such an origin would never match.
            let default_port =
                (origin.starts_with("https://") && origin.ends_with(":443")) || (origin.starts_with("http://") && origin.ends_with(":80"));
            anyhow::ensure!(
                valid && !default_port,
                "cors_origins: {origin:?} is not an origin as browsers send it (they leave out :80 for http and :443 for https): http:// or https://, a lowercase host, an optional \
                 :port, no path (e.g. https://app.example.com or http://localhost:5173), or `*` for any"
            );
        }
        Ok(self.cors_origins.clone())
    }

    /// `gossip_advertise` as a UDP address (None: peers send to `gossip` itself).
    pub fn gossip_advertise_addr(&self) -> anyhow::Result<Option<std::net::SocketAddr>> {
        let Some(address) = &self.gossip_advertise else { return Ok(None) };
        let parsed: std::net::SocketAddr =
            address.parse().map_err(|e| anyhow::anyhow!("gossip_advertise must be IP:PORT (UDP), got {address:?}: {e}"))?;
        anyhow::ensure!(parsed.port() != 0, "gossip_advertise needs a port: peers send gossip there (got {address:?})");
        Ok(Some(parsed))
    }

    /// The gossip key, read from `cluster_key_file`.
    pub fn cluster_key(&self) -> anyhow::Result<Option<crate::cluster::sealed::ClusterKey>> {
        let Some(path) = &self.cluster_key_file else { return Ok(None) };
        let secret = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))?;
        crate::cluster::sealed::ClusterKey::from_secret(&secret).map(Some).map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))
    }

    /// The key that signs Tern's entries in source topics, from `cluster_key_file`.
    pub fn source_entry_key(&self) -> anyhow::Result<Option<crate::log::kafka::EntryKey>> {
        let Some(path) = &self.cluster_key_file else { return Ok(None) };
        let secret = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))?;
        crate::log::kafka::EntryKey::from_secret(&secret).map(Some).map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))
    }

    /// `tern serve` refuses to listen beyond loopback without authentication
    /// unless told `insecure`.
    pub(super) fn check_exposure(&self) -> anyhow::Result<()> {
        if self.auth || self.insecure {
            return Ok(());
        }
        let loopback = match self.listen.parse::<std::net::SocketAddr>() {
            Ok(address) => address.ip().is_loopback(),
            // A host name: loopback only if it is `localhost`.
            Err(_) => self.listen.rsplit_once(':').is_some_and(|(host, _)| host == "localhost"),
        };
        anyhow::ensure!(
            loopback,
            "refusing to listen on {} without authentication: anyone who reaches it could read and write \
             everything. Turn on auth (--auth, docs/security.md), listen on loopback, or pass --insecure",
            self.listen
        );
        Ok(())
    }

    /// How requests are authenticated (`auth/`), with the root token read
    /// or made; None when `auth` is off.
    pub fn auth_config(&self) -> anyhow::Result<Option<crate::auth::AuthConfig>> {
        if !self.auth {
            return Ok(None);
        }
        let path = self.admin_token_file.clone().unwrap_or_else(|| self.data_dir.join("admin.token"));
        let root_token = crate::auth::load_or_create_root_token(&path)?;
        Ok(Some(crate::auth::AuthConfig {
            root_token: Some(root_token),
            jwt: crate::auth::jwt::JwtConfig {
                keys: self.jwt_keys.clone(),
                jwks_file: self.jwt_jwks_file.clone(),
                audiences: self.jwt_audience.clone(),
                issuers: self.jwt_issuer.clone(),
                grants_claim: self.jwt_grants_claim.clone(),
            },
            failures_per_minute: self.auth_failures_per_minute,
        }))
    }

    /// `namespaces`, parsed: (name, partitions).
    pub fn namespaces_to_create(&self) -> anyhow::Result<Vec<(String, u32)>> {
        self.namespaces
            .iter()
            .map(|spec| {
                let (name, partitions) = spec.split_once(':').ok_or_else(|| anyhow::anyhow!("namespaces: each is NAME:PARTITIONS, got {spec:?}"))?;
                let partitions = partitions.parse().map_err(|_| anyhow::anyhow!("namespaces: bad partition count in {spec:?}"))?;
                Ok((name.to_string(), partitions))
            })
            .collect()
    }
}
