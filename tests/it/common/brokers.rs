//! Kafka brokers of a test's own (`scripts/kafka.sh start --brokers N` in a
//! scratch directory), so stopping or killing one touches no other test;
//! stopped however the test ends.

pub(crate) struct Brokers {
    pub dir: tempfile::TempDir,
    pub bootstrap: String,
}

impl Brokers {
    pub(crate) fn start(brokers: usize) -> Brokers {
        Brokers::start_with(brokers, &[])
    }

    /// `start` with more of `kafka.sh start`'s options (`--sasl-ssl`).
    pub(crate) fn start_with(brokers: usize, options: &[&str]) -> Brokers {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new("scripts/kafka.sh")
            .args(["start", "--brokers", &brokers.to_string(), "--dir", dir.path().to_str().unwrap()])
            .args(options)
            .output()
            .unwrap();
        if !output.status.success() {
            // What did start is stopped (and any namespaces made removed) before the dir goes.
            let _ = std::process::Command::new("scripts/kafka.sh").args(["stop", "--dir", dir.path().to_str().unwrap()]).status();
        }
        assert!(output.status.success(), "kafka.sh start --brokers {brokers}: {}", String::from_utf8_lossy(&output.stderr));
        let bootstrap = String::from_utf8(output.stdout).unwrap().lines().last().unwrap().trim().to_string();
        Brokers { dir, bootstrap }
    }

    /// `scripts/kafka.sh ARGS --dir <these brokers' dir>`; asserts it succeeded.
    pub(crate) fn kafka(&self, args: &[&str]) {
        let status = std::process::Command::new("scripts/kafka.sh").args(args).args(["--dir", self.dir.path().to_str().unwrap()]).status().unwrap();
        assert!(status.success(), "kafka.sh {args:?}");
    }
}

impl Drop for Brokers {
    fn drop(&mut self) {
        let _ = std::process::Command::new("scripts/kafka.sh").args(["stop", "--dir", self.dir.path().to_str().unwrap()]).status();
    }
}
