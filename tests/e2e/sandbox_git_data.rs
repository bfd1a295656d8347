//! What CMD can do with git's data where it may write it (`--allow-git-writes`, a bare
//! repository that is a writable root): entries git never makes (a link in `logs/` that
//! the host's next reflog line is written through, a FIFO in `objects/`) are removed
//! after the run and reported; objects shared by hard link with a repository outside the
//! roots refuse the run; replace refs stay read-only; a bare root's `packed-refs`, `HEAD`
//! and `shallow` cannot become links. Each attack as a user would meet it, with real git
//! on the host afterwards, and its control.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{git, stderr, stdout, Run, TestDir};

/// A repository in the workspace with one commit.
fn workspace_repo(run: &Run) {
    git(&run.workspace, &["init", "-q"]);
    std::fs::write(run.workspace.join("a.txt"), "a\n").unwrap();
    git(&run.workspace, &["add", "a.txt"]);
    git(&run.workspace, &["commit", "-qm", "init"]);
}

fn foreign_records(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "git_metadata_created" && e["kind"] == "foreign_entry")
        .collect()
}

fn record_for<'a>(records: &[&'a Value], path: &Path) -> Option<&'a Value> {
    records
        .iter()
        .copied()
        .find(|r| r["path"] == path.to_str().unwrap())
}

/// Whether `path` carries netbox's placeholder mark.
fn marked(path: &Path) -> bool {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os,sys; print('user.netbox.placeholder' in os.listxattr(sys.argv[1]))",
        ])
        .arg(path)
        .output()
        .expect("python3 is needed for this test");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim() == "True"
}

/// CMD replaces `.git/logs/HEAD` with a link to a shell start-up file outside the roots
/// and commits on a side branch with a subject that is a shell command; the user's
/// `git cherry-pick` of that branch on the host would append the reflog line (the
/// subject) through the link. A FIFO planted in `objects/` would hang the host's git.
/// After the run both are gone and reported; a link the user made before the run is
/// reported and left. Controls: the side-branch commit lands, an ordinary `git fetch`
/// writes its `FETCH_HEAD` (which netbox made for the run: it keeps what git wrote,
/// without netbox's mark), and the cherry-pick works.
#[test]
fn links_and_fifos_planted_in_git_data_are_removed_after_the_run() {
    // Outside the private /tmp: the upstream repository is read inside.
    let dir = TestDir::outside_tmp("gitdata-reflog-link");
    let upstream = crate::support::bare_repo(&dir.path, "upstream.git", "upstream\n");
    let run = Run::new(&dir).arg("--allow-git-writes");
    workspace_repo(&run);
    git(
        &run.workspace,
        &["remote", "add", "up", upstream.to_str().unwrap()],
    );
    let bashrc = dir.join("bashrc");
    std::fs::write(&bashrc, "# my bashrc\n").unwrap();
    let marker = dir.join("PWNED");
    // The user's own link, made before the run.
    let own = run.workspace.join(".git/logs/refs/mine");
    std::os::unix::fs::symlink("/dev/null", &own).unwrap();
    // Older than the run's start, which is taken to the second where the filesystem
    // keeps no birth times.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(!run.workspace.join(".git/FETCH_HEAD").exists());
    let out = run.sh(&format!(
        "ln -s {bashrc} .git/logs/HEAD.new && mv -f .git/logs/HEAD.new .git/logs/HEAD && echo LINKED; \
         mkfifo .git/objects/fifo && echo FIFO; \
         git fetch -q up && echo FETCHED; \
         export GIT_INDEX_FILE=/tmp/i && git read-tree HEAD && echo fix > fix.txt && git add fix.txt && \
         rm fix.txt && t=$(git write-tree) && \
         c=$(git -c user.email=t@netbox.test -c user.name=t commit-tree -p HEAD -m 'fix; touch {marker} #' $t) && \
         git update-ref refs/heads/agent $c && echo COMMITTED",
        bashrc = bashrc.display(),
        marker = marker.display(),
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "LINKED\nFIFO\nFETCHED\nCOMMITTED\n",
        "{}",
        stderr(&out)
    );
    let head_log = run.workspace.join(".git/logs/HEAD");
    let fifo = run.workspace.join(".git/objects/fifo");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("removed {}", head_log.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("removed {}", fifo.display())),
        "{err}"
    );
    assert!(err.contains(&own.display().to_string()), "{err}");
    assert!(std::fs::symlink_metadata(&head_log).is_err());
    assert!(std::fs::symlink_metadata(&fifo).is_err());
    // The user's own link is left.
    assert!(std::fs::symlink_metadata(&own).is_ok_and(|m| m.file_type().is_symlink()));
    let events = run.events();
    let found = foreign_records(&events);
    let link = record_for(&found, &head_log).expect("a record of the link");
    assert_eq!(link["entry"], "symlink");
    assert_eq!(link["removed"], true);
    assert_eq!(record_for(&found, &fifo).unwrap()["entry"], "fifo");
    let mine = record_for(&found, &own).expect("a record of the user's link");
    assert_eq!(mine["how"], "before_run");
    assert!(mine.get("removed").is_none(), "{mine}");
    // FETCH_HEAD, made for the run and written by the fetch: kept, no longer marked.
    let fetch_head = run.workspace.join(".git/FETCH_HEAD");
    assert!(std::fs::read_to_string(&fetch_head).unwrap().contains("up"));
    assert!(!marked(&fetch_head), "FETCH_HEAD still carries the mark");
    // The user takes the agent's commit, then a shell reads its start-up file.
    git(&run.workspace, &["cherry-pick", "agent"]);
    assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# my bashrc\n");
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!(". {}", bashrc.display()))
        .output()
        .unwrap();
    assert!(sourced.status.success());
    assert!(!marker.exists(), "the subject ran from the start-up file");
    assert!(git(&run.workspace, &["log", "-1", "--format=%s"]).starts_with("fix; touch"));
}

/// A workspace cloned locally (`git clone /path/repo ws`) shares its objects with the
/// source by hard link: CMD could `chmod u+w` one and rewrite it, and with it the
/// source's object, outside every writable root. `--allow-git-writes` refuses such a
/// workspace with the fix; after the fix (`git repack -a -d && git prune-packed`) the
/// same run goes ahead and the source is untouched.
#[test]
fn hard_linked_objects_refuse_allow_git_writes() {
    let dir = TestDir::new("gitdata-hardlinks");
    let upstream = dir.join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q"]);
    std::fs::write(upstream.join("build.sh"), "echo hello\n").unwrap();
    git(&upstream, &["add", "build.sh"]);
    git(&upstream, &["commit", "-qm", "init"]);
    let run = Run::new(&dir).arg("--allow-git-writes");
    std::fs::remove_dir(&run.workspace).unwrap();
    git(
        &dir.path,
        &["clone", "-q", upstream.to_str().unwrap(), "ws"],
    );
    let blob = git(&upstream, &["rev-parse", "HEAD:build.sh"]);
    let blob = blob.trim();
    let object = format!("objects/{}/{}", &blob[..2], &blob[2..]);
    let shared = std::fs::metadata(upstream.join(".git").join(&object)).unwrap();
    assert!(
        std::os::unix::fs::MetadataExt::nlink(&shared) > 1,
        "the clone did not hard-link"
    );
    let attack = format!(
        "f=.git/{object}; chmod u+w $f && python3 -c \"
import zlib,sys
c=b'echo pwned by CMD\\n'
open(sys.argv[1],'wb').write(zlib.compress(b'blob %d\\0' % len(c) + c))\" $f && echo REWRITTEN"
    );
    let out = run.sh(&attack);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(err.contains("hard links"), "{err}");
    assert!(err.contains("repack -a -d"), "{err}");
    // The user's next checkout in the source repository reads its own object.
    std::fs::remove_file(upstream.join("build.sh")).unwrap();
    git(&upstream, &["checkout", "--", "build.sh"]);
    assert_eq!(
        std::fs::read_to_string(upstream.join("build.sh")).unwrap(),
        "echo hello\n"
    );
    // Control: with objects of its own, the workspace runs, and CMD writes only its own.
    git(&run.workspace, &["repack", "-q", "-a", "-d"]);
    git(&run.workspace, &["prune-packed"]);
    let out = run.sh(
        "c=$(git -c user.email=t@netbox.test -c user.name=t commit-tree HEAD^{tree} -p HEAD -m side) && \
         git update-ref refs/heads/side $c && echo COMMITTED",
    );
    assert_eq!(stdout(&out), "COMMITTED\n", "{}", stderr(&out));
    assert!(git(&run.workspace, &["log", "--oneline", "side"]).contains("side"));
}

/// A replace ref makes git read CMD's object wherever the original is named: CMD
/// rewrites `build.sh` and replaces the committed blob with it, so `git diff` on the
/// host shows nothing and `git reset --hard` keeps CMD's file. `refs/replace/` stays
/// read-only. Control: a ref on a side branch is written.
#[test]
fn replace_refs_cannot_hide_a_change() {
    let dir = TestDir::new("gitdata-replace");
    let run = Run::new(&dir).arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q"]);
    std::fs::write(run.workspace.join("build.sh"), "echo building\n").unwrap();
    git(&run.workspace, &["add", "build.sh"]);
    git(&run.workspace, &["commit", "-qm", "init"]);
    let out = run.sh(
        "printf 'echo building; touch PWNED\\n' > build.sh; \
         evil=$(git hash-object -w build.sh) && \
         git update-ref refs/replace/$(git rev-parse HEAD:build.sh) $evil 2>/dev/null && echo REPLACED; \
         git update-ref refs/heads/side HEAD && echo SIDE",
    );
    assert_eq!(stdout(&out), "SIDE\n", "{}", stderr(&out));
    assert!(git(&run.workspace, &["diff"]).contains("PWNED"));
    git(&run.workspace, &["reset", "-q", "--hard"]);
    assert_eq!(
        std::fs::read_to_string(run.workspace.join("build.sh")).unwrap(),
        "echo building\n"
    );
    // The placeholder is gone after the run.
    assert!(!run.workspace.join(".git/refs/replace").exists());
}

/// A repository whose refs are a reftable keeps one file for every ref, replace refs
/// too: its refs stay read-only (ref updates fail inside), its objects writable.
#[test]
fn a_reftable_repository_keeps_its_refs_read_only() {
    let dir = TestDir::new("gitdata-reftable");
    let run = Run::new(&dir).arg("--allow-git-writes");
    git(&run.workspace, &["init", "-q", "--ref-format=reftable"]);
    std::fs::write(run.workspace.join("build.sh"), "echo building\n").unwrap();
    git(&run.workspace, &["add", "build.sh"]);
    git(&run.workspace, &["commit", "-qm", "init"]);
    let out = run.sh(
        "evil=$(printf 'touch PWNED\\n' | git hash-object -w --stdin) && echo OBJECT; \
         git update-ref refs/replace/$(git rev-parse HEAD:build.sh) $evil 2>/dev/null && echo REPLACED; \
         git update-ref refs/heads/side HEAD 2>/dev/null && echo SIDE",
    );
    assert_eq!(stdout(&out), "OBJECT\n", "{}", stderr(&out));
    assert_eq!(git(&run.workspace, &["for-each-ref", "refs/replace"]), "");
}

/// A bare repository that is a writable root: CMD names a branch with a shell command
/// and makes `packed-refs` a link to a missing `~/.bash_profile`; the user's later
/// `git pack-refs --all` would write the branch names through it. `packed-refs`, `HEAD`
/// and `shallow` are pinned (placeholders where missing), and a link CMD leaves at the
/// top or in `logs/` is removed after the run. Control: a push and a ref update land.
#[test]
fn a_bare_root_cannot_be_given_links_git_writes_through() {
    let dir = TestDir::new("gitdata-bare-root");
    let bare = dir.join("b.git");
    git(&dir.path, &["init", "-q", "--bare", "b.git"]);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q"]);
    git(&src, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&src, &["push", "-q", bare.to_str().unwrap(), "HEAD:main"]);
    let profile = dir.join("bash_profile");
    let marker = dir.join("PWNED");
    let run = Run::new(&dir).arg("--write").arg(bare.to_str().unwrap());
    let out = run.sh(&format!(
        "cd {bare} && \
         git update-ref 'refs/heads/x;touch${{IFS}}{marker};#' refs/heads/main && echo BRANCH; \
         ln -s {profile} packed-refs 2>/dev/null && echo PACKED_REFS; \
         ln -sf {profile} HEAD 2>/dev/null && echo HEAD; \
         ln -s {profile} shallow 2>/dev/null && echo SHALLOW; \
         ln -s {profile} ORIG_HEAD && echo ORIG_HEAD; \
         mkdir -p logs && ln -s {profile} logs/HEAD && echo LOGS; \
         git update-ref refs/heads/side refs/heads/main && echo SIDE",
        bare = bare.display(),
        marker = marker.display(),
        profile = profile.display(),
    ));
    assert_eq!(
        stdout(&out),
        "BRANCH\nORIG_HEAD\nLOGS\nSIDE\n",
        "{}",
        stderr(&out)
    );
    let err = stderr(&out);
    assert!(err.contains("ORIG_HEAD"), "{err}");
    assert!(err.contains("logs/HEAD"), "{err}");
    for gone in ["ORIG_HEAD", "logs/HEAD", "packed-refs", "shallow"] {
        assert!(
            std::fs::symlink_metadata(bare.join(gone)).is_err(),
            "{gone} left"
        );
    }
    // The user, later: packs the refs, then a login shell starts.
    git(&bare, &["pack-refs", "--all"]);
    assert!(!profile.exists(), "git wrote through a link");
    assert!(!marker.exists());
    assert!(git(&bare, &["branch", "--list", "side"]).contains("side"));
}
