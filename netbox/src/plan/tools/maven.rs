//! maven: mirrors and profile repositories in the user's `~/.m2/settings.xml` and
//! maven's global `conf/settings.xml`; `<repositories>` and `<pluginRepositories>` of the
//! project's `pom.xml` (the workspace's, so marked). Maven's default repository is in no
//! configuration file: it is read from maven's own super POM, inside the
//! `maven-model-builder` jar of the installed maven, unless a mirror stands in for it.

use std::path::{Path, PathBuf};

use super::{query, Context, ToolRules};

/// Where the super POM lies inside maven-model-builder's jar.
const SUPER_POM: &str = "org/apache/maven/model/pom-4.0.0.xml";

pub fn discover(ctx: &Context<'_>) -> ToolRules {
    let mut out = ToolRules::default();
    let home = maven_home(ctx.untrusted);
    let mut settings: Vec<PathBuf> = Vec::new();
    if let Some(user) = std::env::var_os("HOME").map(PathBuf::from) {
        settings.push(user.join(".m2/settings.xml"));
    }
    if let Some(home) = &home {
        settings.push(home.join("conf/settings.xml"));
    }
    let mut central_mirrored = false;
    for file in settings {
        let Some(text) = super::read_small(&file) else {
            continue;
        };
        if out.skip_hidden(&file, ctx) {
            continue;
        }
        let from_workspace = query::is_untrusted(&file, ctx.untrusted);
        match repositories_in(&text) {
            Ok(found) => {
                central_mirrored |= found.central_mirrored;
                for url in found.urls {
                    out.add_from(
                        &url,
                        format!("maven settings {}", file.display()),
                        from_workspace,
                    );
                }
            }
            Err(reason) => out.note(format!("cannot read {}: {reason}", file.display())),
        }
    }
    let pom = ctx.cwd.join("pom.xml");
    if let Some(text) = super::read_small(&pom).filter(|_| !out.skip_hidden(&pom, ctx)) {
        match repositories_in(&text) {
            Ok(found) => {
                for url in found.urls {
                    out.add_from(&url, format!("repository in {}", pom.display()), true);
                }
            }
            Err(reason) => out.note(format!("cannot read {}: {reason}", pom.display())),
        }
    }
    if ctx.cwd.join(".mvn/maven.config").exists() {
        out.note(
            "the project's .mvn/maven.config is not read: settings it names need netbox learn",
        );
    }
    if central_mirrored {
        out.note("maven's default repository is mirrored in its settings");
        return out;
    }
    let default = home
        .as_deref()
        .ok_or("maven's installation was not found")
        .and_then(super_pom);
    match default.and_then(|text| repositories_in(&text).map_err(|_| "its super POM is unreadable"))
    {
        Ok(found) => {
            for url in found.urls {
                out.add(&url, "maven's default repository (its super POM)");
            }
        }
        Err(reason) => out.note(format!("maven's default repository is unknown: {reason}")),
    }
    out
}

/// The installed maven: `MAVEN_HOME`, or the directory above the `bin/` of the `mvn`
/// found on a trusted `PATH` directory, links followed.
fn maven_home(untrusted: &[PathBuf]) -> Option<PathBuf> {
    let from_env = std::env::var_os("MAVEN_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && !query::is_untrusted(p, untrusted));
    from_env.or_else(|| {
        let mvn = std::fs::canonicalize(query::trusted("mvn", untrusted)?).ok()?;
        let home = mvn.parent()?.parent()?.to_owned();
        (!query::is_untrusted(&home, untrusted)).then_some(home)
    })
}

/// The super POM's text, from `lib/maven-model-builder-*.jar` under maven's home.
fn super_pom(home: &Path) -> Result<String, &'static str> {
    use std::io::Read;
    let jar = std::fs::read_dir(home.join("lib"))
        .map_err(|_| "maven's lib/ is unreadable")?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("maven-model-builder-") && n.ends_with(".jar"))
        })
        .ok_or("no maven-model-builder jar in maven's lib/")?;
    let file = std::fs::File::open(&jar).map_err(|_| "maven-model-builder's jar is unreadable")?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|_| "maven-model-builder's jar is no zip")?;
    let entry = archive
        .by_name(SUPER_POM)
        .map_err(|_| "no super POM in maven-model-builder's jar")?;
    let mut text = String::new();
    entry
        .take(1 << 20)
        .read_to_string(&mut text)
        .map_err(|_| "the super POM is unreadable")?;
    Ok(text)
}

/// What one settings file or POM says about repositories.
#[derive(Debug, Default, PartialEq, Eq)]
struct Found {
    urls: Vec<String>,
    /// A mirror stands in for maven's default repository (`central`, `*`, `external:*`).
    central_mirrored: bool,
}

/// The `<url>` of each `<mirrors><mirror>`, `<repositories><repository>` and
/// `<pluginRepositories><pluginRepository>`, wherever they stand (a settings file keeps
/// repositories in profiles; a POM at its top). Not `<distributionManagement>`'s, which
/// is where a build publishes, not what it fetches.
fn repositories_in(xml: &str) -> Result<Found, String> {
    // roxmltree refuses a DTD by default: no entity expansion from a hostile file.
    let doc = roxmltree::Document::parse(xml).map_err(|e| e.to_string())?;
    let mut found = Found::default();
    let child_text = |node: roxmltree::Node<'_, '_>, name: &str| {
        node.children()
            .find(|c| c.tag_name().name() == name)
            .and_then(|c| c.text())
            .map(|t| t.trim().to_owned())
    };
    for node in doc.descendants().filter(|n| n.is_element()) {
        let parent = node.parent().map(|p| p.tag_name().name()).unwrap_or("");
        let listed = matches!(
            (parent, node.tag_name().name()),
            ("mirrors", "mirror")
                | ("repositories", "repository")
                | ("pluginRepositories", "pluginRepository")
        );
        if !listed {
            continue;
        }
        // A blocking mirror (maven's own for plain-HTTP repositories) is fetched from by no one.
        let blocks = child_text(node, "blocked").is_some_and(|b| b == "true");
        if let Some(url) = child_text(node, "url").filter(|_| !blocks) {
            found.urls.push(url);
        }
        if node.tag_name().name() == "mirror" {
            let of = child_text(node, "mirrorOf").unwrap_or_default();
            let of: Vec<&str> = of.split(',').map(str::trim).collect();
            found.central_mirrored |= !of.contains(&"!central")
                && of
                    .iter()
                    .any(|m| matches!(*m, "*" | "central" | "external:*"));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_mirrors_and_profile_repositories() {
        let settings = r#"<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.2.0">
  <mirrors>
    <mirror><id>corp</id><mirrorOf>central</mirrorOf><url>https://maven.corp.test/repo</url></mirror>
  </mirrors>
  <profiles><profile><id>extra</id>
    <repositories><repository><id>e</id><url>https://extra.test:8443/maven2</url></repository></repositories>
    <pluginRepositories><pluginRepository><id>p</id><url>http://plugins.test/m2</url></pluginRepository></pluginRepositories>
  </profile></profiles>
</settings>"#;
        let found = repositories_in(settings).unwrap();
        assert_eq!(
            found.urls,
            [
                "https://maven.corp.test/repo",
                "https://extra.test:8443/maven2",
                "http://plugins.test/m2"
            ]
        );
        assert!(found.central_mirrored);
    }

    #[test]
    fn a_poms_repositories_but_not_where_it_publishes() {
        let pom = r#"<project xmlns="http://maven.apache.org/POM/4.0.0">
  <repositories><repository><id>r</id><url>https://repo.test/m2</url></repository></repositories>
  <distributionManagement>
    <repository><id>rel</id><url>https://publish.test/releases</url></repository>
    <snapshotRepository><id>s</id><url>https://publish.test/snapshots</url></snapshotRepository>
  </distributionManagement>
</project>"#;
        let found = repositories_in(pom).unwrap();
        assert_eq!(found.urls, ["https://repo.test/m2"]);
        assert!(!found.central_mirrored);
    }

    #[test]
    fn mirrors_of_some_repositories_leave_the_default_alone() {
        let settings = "<settings><mirrors>\
            <mirror><mirrorOf>*,!central</mirrorOf><url>https://m.test/</url></mirror>\
            <mirror><mirrorOf>internal</mirrorOf><url>https://i.test/</url></mirror>\
            <mirror><mirrorOf>external:http:*</mirrorOf><url>http://0.0.0.0/</url>\
            <blocked>true</blocked></mirror>\
            </mirrors></settings>";
        let found = repositories_in(settings).unwrap();
        assert!(!found.central_mirrored);
        assert_eq!(found.urls, ["https://m.test/", "https://i.test/"]);
    }

    #[test]
    fn a_dtd_is_refused() {
        let bomb =
            r#"<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaa">]><settings>&a;</settings>"#;
        assert!(repositories_in(bomb).is_err());
    }
}
