//! Our DIGEST-MD5 server against the JDK's own SASL client, configured as
//! Celeborn's client configures it (mechanism DIGEST-MD5, no authzid, a null
//! protocol, server name "default", QOP auth, Base64 of the app id and of
//! the secret's UTF-8 as name and password). The JDK client must accept our
//! challenge and our rspauth, and we must accept its response; a wrong
//! secret must fail. Needs `java` (11+, single-file launch); without it the
//! test prints SKIPPED and passes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use switchyard_celeborn::auth::digest::{Challenge, DigestError};

const CLIENT: &str = r#"
import javax.security.sasl.*;
import javax.security.auth.callback.*;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class JdkDigestClient {
  static String b64(String s) {
    return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
  }
  public static void main(String[] args) throws Exception {
    String app = args[0], secret = args[1];
    CallbackHandler handler = callbacks -> {
      for (Callback c : callbacks) {
        if (c instanceof NameCallback) ((NameCallback) c).setName(b64(app));
        else if (c instanceof PasswordCallback) ((PasswordCallback) c).setPassword(b64(secret).toCharArray());
        else if (c instanceof RealmCallback) ((RealmCallback) c).setText(((RealmCallback) c).getDefaultText());
      }
    };
    SaslClient client = Sasl.createSaslClient(new String[] {"DIGEST-MD5"}, null, null, "default",
        Map.of(Sasl.QOP, "auth"), handler);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, true, "UTF-8");
    out.println("initial=" + client.hasInitialResponse());
    out.println(new String(client.evaluateChallenge(in.readLine().getBytes(StandardCharsets.UTF_8)), StandardCharsets.UTF_8));
    try {
      client.evaluateChallenge(in.readLine().getBytes(StandardCharsets.UTF_8));
      out.println("complete=" + client.isComplete() + " qop=" + client.getNegotiatedProperty(Sasl.QOP));
    } catch (SaslException e) {
      out.println("FAIL " + e.getMessage());
    }
  }
}
"#;

fn java() -> Option<()> {
    Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| ())
}

/// Runs one exchange: (what our verify said, the JDK client's last line).
fn exchange(
    app: &str,
    client_secret: &str,
    server_secret: &[u8],
) -> (Result<String, DigestError>, String) {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("JdkDigestClient.java");
    std::fs::write(&source, CLIENT).unwrap();
    let mut child = Command::new("java")
        .arg(&source)
        .args([app, client_secret])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().expect("a line from the JDK client").unwrap();
    assert_eq!(
        next(),
        "initial=false",
        "the JDK client sends an empty first token"
    );
    let challenge = Challenge::new();
    stdin.write_all(&challenge.token()).unwrap();
    stdin.write_all(b"\n").unwrap();
    let response = next();
    assert!(
        response.contains("digest-uri=\"null/default\""),
        "{response}"
    );
    let verified = challenge.verify(response.as_bytes(), |id| {
        (id == app).then(|| server_secret.to_vec())
    });
    // On failure we answer garbage the client must refuse too.
    let reply = match &verified {
        Ok(ok) => ok.rspauth.clone(),
        Err(_) => b"rspauth=00000000000000000000000000000000".to_vec(),
    };
    stdin.write_all(&reply).unwrap();
    stdin.write_all(b"\n").unwrap();
    let last = next();
    assert!(child.wait().unwrap().success());
    (verified.map(|ok| ok.app_id), last)
}

#[test]
fn the_jdk_sasl_client_authenticates_against_our_digest_server() {
    if java().is_none() {
        eprintln!("SKIPPED: no java on PATH");
        return;
    }
    // A secret as Celeborn's LM makes them: random bytes decoded as UTF-8,
    // so full of replacement characters and other non-ASCII.
    let secret = "s3cr3t\u{e9}-\u{fffd}\u{fffd}x";
    let (verified, last) = exchange("local-1700000000000_1", secret, secret.as_bytes());
    assert_eq!(verified, Ok("local-1700000000000_1".to_string()));
    assert_eq!(last, "complete=true qop=auth");

    let (verified, last) = exchange("local-1700000000000_1", "wrong", secret.as_bytes());
    assert_eq!(verified, Err(DigestError::Mismatch));
    assert!(last.starts_with("FAIL"), "{last}");
}
