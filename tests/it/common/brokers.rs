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

    /// (`--netns` brokers) a network namespace of its own on the brokers'
    /// bridge for host `h` (1..99), whose links can be cut (`kafka.sh
    /// cut-link hH nI`): its name and address.
    pub(crate) fn add_host(&self, h: u32) -> (String, String) {
        let output = std::process::Command::new("scripts/kafka.sh")
            .args(["add-host", &h.to_string(), "--dir", self.dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(output.status.success(), "kafka.sh add-host {h}: {}", String::from_utf8_lossy(&output.stderr));
        let line = String::from_utf8(output.stdout).unwrap();
        let (ns, address) = line.trim().split_once(' ').expect("NAMESPACE ADDRESS");
        (ns.to_string(), address.to_string())
    }

    /// The brokers' count (`nI` endpoints of `cut-link`, 1-based).
    pub(crate) fn count(&self) -> usize {
        self.bootstrap.split(',').count()
    }
}

impl Drop for Brokers {
    fn drop(&mut self) {
        let _ = std::process::Command::new("scripts/kafka.sh").args(["stop", "--dir", self.dir.path().to_str().unwrap()]).status();
    }
}
