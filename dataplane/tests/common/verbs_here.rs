//! Whether the verbs tests can run: inside the VM test's guest, which made two Soft-RoCE devices
//! and says so in `ZCX_VERBS_EXPECT`. Elsewhere they print `skipped:` and why.

/// True where the two devices are; false, after printing `skipped:`, where they are not.
pub fn verbs_here() -> bool {
    if let Some(why) = zcx_dataplane::verbs::verbs_missing() {
        println!("skipped: {why}");
        return false;
    }
    if std::env::var_os("ZCX_VERBS_EXPECT").is_none() {
        println!("skipped: no verbs device here (the VM test sets ZCX_VERBS_EXPECT)");
        return false;
    }
    true
}
