//! CPU time of the processes in a measured row.

/// CPU time of processes over a measured row, from `/proc/<pid>/stat`
/// (utime + stime), so a row can say where the machine's cores went.
pub(crate) struct CpuMeter {
    /// (label, pid, CPU seconds at the start).
    processes: Vec<(&'static str, u32, f64)>,
}

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on Linux for x86-64).
const CLOCK_TICKS_PER_S: f64 = 100.0;

fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields after its ')' are fixed.
    let after_name = &stat[stat.rfind(')').ok_or_else(|| anyhow::anyhow!("bad /proc/{pid}/stat"))? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let field = |i: usize| fields.get(i).ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat has {} fields", fields.len() + 2));
    let ticks: u64 = field(11)?.parse::<u64>()? + field(12)?.parse::<u64>()?;
    Ok(ticks as f64 / CLOCK_TICKS_PER_S)
}

impl CpuMeter {
    pub(crate) fn start(processes: &[(&'static str, u32)]) -> anyhow::Result<CpuMeter> {
        let processes = processes.iter().map(|&(label, pid)| Ok((label, pid, cpu_seconds(pid)?))).collect::<anyhow::Result<_>>()?;
        Ok(CpuMeter { processes })
    }

    /// CPU µs each process spent per operation since `start`, by label.
    pub(crate) fn per_op_us(&self, ops: f64) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let each = self.per_op_us_each(ops)?;
        Ok(self.processes.iter().zip(each).map(|(&(label, _, _), us)| (label.to_string(), serde_json::json!(us))).collect())
    }

    /// CPU µs each process spent per operation since `start` (to a tenth),
    /// in the order they were given.
    pub(crate) fn per_op_us_each(&self, ops: f64) -> anyhow::Result<Vec<f64>> {
        self.processes
            .iter()
            .map(|&(_, pid, at_start)| {
                let us = (cpu_seconds(pid)? - at_start) * 1e6 / ops.max(1.0);
                Ok((us * 10.0).round() / 10.0)
            })
            .collect()
    }
}
