//! Can this host boot BoxLite microVMs? A cheap answer (no VM is booted).
//!
//! BoxLite's own check (`SystemCheck::run`: open `/dev/kvm`, run a real-mode
//! `HLT` in a throwaway VM) passes on hosts whose KVM is a paravirtual
//! nested hypervisor (PVM, the `kvm_pvm` module): there the guest kernel
//! later stops with `KVM_EXIT_INTERNAL_ERROR` and `start` fails after
//! 15-25 s with a sanitized "The VM failed to start.". This module adds the
//! signals that identify such hosts, so the daemon can refuse at once.
//!
//! The decision is a pure function of [`HostFacts`], so tests feed it fake
//! `/proc/cpuinfo` text instead of the real files.

/// Whether microVMs can boot here, and why (or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub can_boot: bool,
    pub reason: String,
}

impl Verdict {
    fn no(reason: impl Into<String>) -> Verdict {
        Verdict {
            can_boot: false,
            reason: reason.into(),
        }
    }
}

/// Why BoxLite cannot run on a PVM host.
pub const PVM_REASON: &str = "KVM here is a paravirtual nested hypervisor (kvm_pvm), on which BoxLite's guest kernel stops with KVM_EXIT_INTERNAL_ERROR";

/// Why BoxLite cannot run where KVM exists without hardware virtualization.
pub const NO_VMX_REASON: &str = "KVM here runs inside a virtual machine without hardware virtualization extensions (no vmx/svm flag in /proc/cpuinfo), i.e. a paravirtual nested hypervisor, on which BoxLite's guest kernel stops with KVM_EXIT_INTERNAL_ERROR";

/// How `/dev/kvm` answered an open for reading and writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvmAccess {
    Missing,
    /// It exists but could not be opened (the text says why).
    Denied(String),
    Ok,
}

/// What [`judge`] decides from; gathered by [`HostFacts::probe`].
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub kvm: KvmAccess,
    /// `/sys/module/kvm_pvm` exists.
    pub pvm_module: bool,
    /// The text of `/proc/cpuinfo` (empty if unreadable).
    pub cpuinfo: String,
}

impl HostFacts {
    #[cfg(target_os = "linux")]
    pub fn probe() -> HostFacts {
        let kvm = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            Ok(_) => KvmAccess::Ok,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => KvmAccess::Missing,
            Err(e) => KvmAccess::Denied(e.to_string()),
        };
        HostFacts {
            kvm,
            pvm_module: std::path::Path::new("/sys/module/kvm_pvm").exists(),
            cpuinfo: std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default(),
        }
    }
}

/// The CPU flags that matter, from the first `flags` line of a
/// `/proc/cpuinfo` text (x86). `None` when there is no such line (other
/// architectures, unreadable file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFlags {
    pub hypervisor: bool,
    /// `vmx` (Intel VT-x) or `svm` (AMD-V).
    pub hw_virt: bool,
}

pub fn cpu_flags(cpuinfo: &str) -> Option<CpuFlags> {
    let line = cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "flags").then_some(value)
    })?;
    let mut flags = CpuFlags {
        hypervisor: false,
        hw_virt: false,
    };
    for f in line.split_whitespace() {
        match f {
            "hypervisor" => flags.hypervisor = true,
            "vmx" | "svm" => flags.hw_virt = true,
            _ => {}
        }
    }
    Some(flags)
}

/// The host-fact part of the verdict: `Some` when the facts alone decide
/// (a refusal), `None` when BoxLite's own check should have the last word.
///
/// What stops every user comes first (no KVM, a paravirtual hypervisor, no
/// hardware virtualization): advice to join the kvm group would not help
/// there.
pub fn judge(facts: &HostFacts) -> Option<Verdict> {
    if facts.kvm == KvmAccess::Missing {
        return Some(Verdict::no(
            "/dev/kvm does not exist: KVM is not available (enable hardware virtualization, load kvm_intel or kvm_amd)",
        ));
    }
    if facts.pvm_module {
        return Some(Verdict::no(PVM_REASON));
    }
    if let Some(flags) = cpu_flags(&facts.cpuinfo)
        && flags.hypervisor
        && !flags.hw_virt
    {
        return Some(Verdict::no(NO_VMX_REASON));
    }
    if let KvmAccess::Denied(e) = &facts.kvm {
        return Some(Verdict::no(format!(
            "/dev/kvm cannot be opened read-write ({e}); add the user to the group owning /dev/kvm (usually kvm)"
        )));
    }
    None
}

/// Whether BoxLite microVMs can boot on this host. Cheap (a few
/// milliseconds: file reads plus BoxLite's KVM smoke test); boots nothing.
pub fn preflight() -> Verdict {
    imp::preflight()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;

    pub fn preflight() -> Verdict {
        if let Some(v) = judge(&HostFacts::probe()) {
            return v;
        }
        system_check()
    }
}

#[cfg(target_os = "macos")]
mod imp {
    use super::*;

    pub fn preflight() -> Verdict {
        if !cfg!(target_arch = "aarch64") {
            return Verdict::no("BoxLite supports macOS on Apple silicon only");
        }
        match hv_support() {
            Some(1) => system_check(),
            Some(_) => Verdict::no(
                "Hypervisor.framework is not supported here (sysctl kern.hv_support is 0)",
            ),
            None => Verdict::no("sysctl kern.hv_support is not readable"),
        }
    }

    /// `sysctl kern.hv_support`.
    fn hv_support() -> Option<i32> {
        let mut value: libc::c_int = 0;
        let mut len: libc::size_t = std::mem::size_of::<libc::c_int>();
        // SAFETY: the name is NUL-terminated, `value`/`len` are valid for
        // writes and `len` is the size of `value`; no new value is set.
        let rc = unsafe {
            libc::sysctlbyname(
                c"kern.hv_support".as_ptr(),
                (&raw mut value).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0).then_some(value)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod imp {
    use super::*;

    pub fn preflight() -> Verdict {
        Verdict::no("BoxLite runs only on Linux (KVM) and macOS (Hypervisor.framework)")
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn system_check() -> Verdict {
    match ::boxlite::system_check::SystemCheck::run() {
        Ok(_) => Verdict {
            can_boot: true,
            reason: if cfg!(target_os = "linux") {
                "KVM is available (/dev/kvm opens and runs a test VM)".into()
            } else {
                "Hypervisor.framework is available".into()
            },
        },
        Err(e) => Verdict::no(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PVM_CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch\nbugs\t\t: spectre_v1\n\nprocessor\t: 1\nflags\t\t: fpu hypervisor\n";
    const NESTED_VMX_CPUINFO: &str = "processor\t: 0\nflags\t\t: fpu vme de pse vmx hypervisor lahf_lm\nvmx flags\t: vnmi preemption_timer\n";
    const BARE_METAL_SVM: &str = "processor\t: 0\nflags\t\t: fpu vme de pse svm lahf_lm\n";
    const ARM64_CPUINFO: &str =
        "processor\t: 0\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull\n";

    fn facts(kvm: KvmAccess, pvm: bool, cpuinfo: &str) -> HostFacts {
        HostFacts {
            kvm,
            pvm_module: pvm,
            cpuinfo: cpuinfo.into(),
        }
    }

    #[test]
    fn flags_are_parsed_from_the_first_flags_line() {
        assert_eq!(
            cpu_flags(PVM_CPUINFO),
            Some(CpuFlags {
                hypervisor: true,
                hw_virt: false
            })
        );
        assert_eq!(
            cpu_flags(NESTED_VMX_CPUINFO),
            Some(CpuFlags {
                hypervisor: true,
                hw_virt: true
            })
        );
        assert_eq!(
            cpu_flags(BARE_METAL_SVM),
            Some(CpuFlags {
                hypervisor: false,
                hw_virt: true
            })
        );
        // "vmx flags" is not "flags"; a word containing vmx is not vmx.
        assert_eq!(
            cpu_flags("vmx flags\t: vnmi\nflags\t: fpu vmxnope hypervisor\n"),
            Some(CpuFlags {
                hypervisor: true,
                hw_virt: false
            })
        );
        assert_eq!(cpu_flags(ARM64_CPUINFO), None);
        assert_eq!(cpu_flags(""), None);
    }

    #[test]
    fn missing_or_closed_kvm_refuses() {
        let v = judge(&facts(KvmAccess::Missing, false, BARE_METAL_SVM)).unwrap();
        assert!(!v.can_boot);
        assert!(v.reason.contains("/dev/kvm does not exist"), "{}", v.reason);
        let v = judge(&facts(
            KvmAccess::Denied("Permission denied (os error 13)".into()),
            false,
            BARE_METAL_SVM,
        ))
        .unwrap();
        assert!(!v.can_boot);
        assert!(v.reason.contains("Permission denied"), "{}", v.reason);
    }

    #[test]
    fn no_group_advice_where_no_vm_boots_for_anyone() {
        let denied = || KvmAccess::Denied("Permission denied (os error 13)".into());
        for (pvm, cpuinfo, reason) in [
            (true, BARE_METAL_SVM, PVM_REASON),
            (false, PVM_CPUINFO, NO_VMX_REASON),
        ] {
            let v = judge(&facts(denied(), pvm, cpuinfo)).unwrap();
            assert_eq!(v, Verdict::no(reason));
            assert!(!v.reason.contains("group"), "{}", v.reason);
        }
    }

    #[test]
    fn pvm_module_refuses_whatever_the_flags_say() {
        let v = judge(&facts(KvmAccess::Ok, true, NESTED_VMX_CPUINFO)).unwrap();
        assert_eq!(v, Verdict::no(PVM_REASON));
        assert!(v.reason.contains("kvm_pvm"));
    }

    #[test]
    fn hypervisor_without_vmx_refuses() {
        let v = judge(&facts(KvmAccess::Ok, false, PVM_CPUINFO)).unwrap();
        assert_eq!(v, Verdict::no(NO_VMX_REASON));
    }

    #[test]
    fn real_virtualization_defers_to_boxlite() {
        assert_eq!(
            judge(&facts(KvmAccess::Ok, false, NESTED_VMX_CPUINFO)),
            None
        );
        assert_eq!(judge(&facts(KvmAccess::Ok, false, BARE_METAL_SVM)), None);
        assert_eq!(judge(&facts(KvmAccess::Ok, false, ARM64_CPUINFO)), None);
        assert_eq!(judge(&facts(KvmAccess::Ok, false, "")), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn preflight_is_cheap_and_explains_itself() {
        let t = std::time::Instant::now();
        let v = preflight();
        let took = t.elapsed();
        eprintln!("preflight: {v:?} in {took:?}");
        assert!(!v.reason.is_empty());
        if std::path::Path::new("/sys/module/kvm_pvm").exists() {
            assert!(!v.can_boot);
            assert!(v.reason.contains("kvm_pvm"));
        }
    }
}
