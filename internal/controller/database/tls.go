package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/daytwo-dev/daytwo/api/v1alpha1"
	"github.com/daytwo-dev/daytwo/internal/controller"
	"github.com/daytwo-dev/daytwo/internal/pki"
)

// TLS: every Database serves TLS, and every network connection to it must
// use TLS (pg_hba.conf has only hostssl lines). Without spec.tls daytwo
// keeps a CA per Database in <name>-ca and issues the server certificate,
// for every Service and pod name, into <name>-server-tls; it renews it a
// third of its life before expiry and the instance managers reload it
// without a restart. The credentials Secret carries the CA (ca.crt) and a
// uri with sslmode=verify-full.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 90 * 24 * time.Hour
	serverRenewal  = 30 * 24 * time.Hour
	// annNotAfter, on the server certificate's Secret, is when the
	// certificate expires, and annNames a fingerprint of the names it
	// carries: the operator decides on renewal from cached metadata alone.
	annNotAfter = "daytwo.dev/not-after"
	annNames    = "daytwo.dev/names"
	// annCA, on the server certificate's Secret and the credentials
	// Secret, is the fingerprint of the CA certificate they carry.
	annCA = "daytwo.dev/ca"
	// annPooler, on the credentials Secret, is the pool host its
	// pooler keys name ("" for none).
	annPooler = "daytwo.dev/pooler-host"
)

func caSecretName(db *v1alpha1.Database) string           { return db.Name + "-ca" }
func ownServerTLSSecretName(db *v1alpha1.Database) string { return db.Name + "-server-tls" }

// serverTLSSecretName is the Secret whose certificate the instances serve.
func serverTLSSecretName(db *v1alpha1.Database) string {
	if t := db.Spec.TLS; t != nil && t.ServerCertificate != nil {
		return t.ServerCertificate.Name
	}
	return ownServerTLSSecretName(db)
}

// serverNames are the names daytwo's own server certificates carry: each
// Service in every form a client in the cluster may use, and every pod
// behind the headless Service.
func serverNames(db *v1alpha1.Database) []string {
	var names []string
	for _, svc := range []string{rwName(db), roName(db), headlessName(db), "*." + headlessName(db)} {
		names = append(names, svc, svc+"."+db.Namespace, svc+"."+db.Namespace+".svc", svc+"."+db.Namespace+".svc.cluster.local")
	}
	return names
}

// requiredNames are the names daytwo's own clients connect with, which a
// user's certificate must carry: the Services and the instances' peer
// names (instanceapi.PeerHost), checked with the first pod's.
func requiredNames(db *v1alpha1.Database) []string {
	return []string{db.PrimaryHost(), db.ReplicaHost(), db.InstanceHost(podName(db, 0))}
}

// tlsState is what reconcileTLS learned: which Secret the instances serve,
// the fingerprint of the CA clients verify with, and whether the
// certificate is usable.
type tlsState struct {
	secret string
	// version is the served Secret's resourceVersion: a change makes the
	// kubelet refresh the instances' copy at once (see nudgePods).
	version string
	ca      string
	// problem says why a user's certificate cannot be served.
	problem  string
	notAfter time.Time
}

// reconcileTLS makes sure the instances have a valid certificate to serve
// and the credentials Secret carries its CA. It returns when to look again.
func (r *Reconciler) reconcileTLS(ctx context.Context, db *v1alpha1.Database, obs *observation) (time.Duration, error) {
	var err error
	if t := db.Spec.TLS; t != nil && t.ServerCertificate != nil {
		err = r.checkUserCertificate(ctx, db, obs)
		if err == nil {
			// The instance API's client CA, whichever certificate is served.
			err = r.ensureCAExists(ctx, db, obs)
		}
	} else {
		err = r.ensureServerCertificate(ctx, db, obs)
	}
	if err != nil || obs.found.tls.problem != "" {
		return 0, err
	}
	if err := r.syncCredentialsCA(ctx, db, obs.found.tls); err != nil {
		return 0, err
	}
	return max(obs.found.tls.notAfter.Add(-serverRenewal).Sub(obs.now), time.Minute), nil
}

// ensureServerCertificate issues the server certificate from the
// Database's CA when there is none, it expires within serverRenewal, or
// its names or CA are not the current ones.
func (r *Reconciler) ensureServerCertificate(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	st, err := r.ensureIssued(ctx, db, obs, ownServerTLSSecretName(db), db.PrimaryHost(), serverNames(db), "server certificate")
	if err == nil && st != nil {
		obs.found.tls = *st
	}
	return err
}

// ensureIssued keeps a certificate for names (cn its common name) in
// Secret name, issued from the Database's CA: issued when there is none,
// it expires within serverRenewal, or its names or CA are not the
// current ones. A Secret that is not the Database's is a conflict (nil).
func (r *Reconciler) ensureIssued(ctx context.Context, db *v1alpha1.Database, obs *observation, name, cn string, names []string, what string) (*tlsState, error) {
	meta := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, name)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(meta), meta)
	if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	exists := err == nil
	fingerprint := pki.Fingerprint([]byte(strings.Join(names, ",")))
	if exists {
		// A Database of this name deleted a moment ago left its
		// certificate for the garbage collector: issue over it.
		owner := metav1.GetControllerOf(meta)
		if (owner == nil || owner.Kind != "Database" || owner.Name != db.Name) && meta.Labels[labelDatabase] != db.Name {
			obs.found.conflict = fmt.Sprintf("Secret %s exists and does not belong to this Database", name)
			return nil, nil
		}
		if owner != nil && owner.UID == db.UID {
			if notAfter, ok := certificateCurrent(fingerprint, meta.Annotations, obs.now); ok {
				return &tlsState{secret: name, version: meta.ResourceVersion, ca: meta.Annotations[annCA], notAfter: notAfter}, nil
			}
		}
	}
	caCert, caKey, err := r.ensureCA(ctx, db, obs)
	if err != nil || obs.found.conflict != "" {
		return nil, err
	}
	cert, key, err := pki.Issue(caCert, caKey, cn, names, pki.Server, obs.now, serverValidity)
	if err != nil {
		return nil, err
	}
	notAfter := obs.now.Add(serverValidity).UTC().Truncate(time.Second)
	s := corev1ac.Secret(name, db.Namespace).
		WithLabels(labels(db)).
		WithAnnotations(map[string]string{
			annNotAfter: notAfter.Format(time.RFC3339),
			annNames:    fingerprint,
			annCA:       pki.Fingerprint(caCert),
		}).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{pki.TLSCert: cert, pki.TLSKey: key, pki.CACert: caCert})
	if err := controller.Apply(ctx, r.Client, s, "Secret "+name); err != nil {
		return nil, err
	}
	verb := "Issued"
	if exists {
		verb = "Renewed"
	}
	controller.Event(ctx, r.Recorder, db, nil, corev1.EventTypeNormal, "Certificate"+verb, "IssueCertificate",
		"%s the %s in Secret %s, valid until %s", verb, what, name, notAfter.Format(time.RFC3339))
	return &tlsState{secret: name, version: ptr.Deref(s.ResourceVersion, ""), ca: pki.Fingerprint(caCert), notAfter: notAfter}, nil
}

// certificateCurrent says, from the annotations of a certificate's
// Secret, whether it was issued for the names whose fingerprint is given
// and stays valid beyond serverRenewal from now, and when it expires.
func certificateCurrent(names string, ann map[string]string, now time.Time) (time.Time, bool) {
	notAfter, err := time.Parse(time.RFC3339, ann[annNotAfter])
	return notAfter, err == nil && ann[annNames] == names && ann[annCA] != "" && now.Add(serverRenewal).Before(notAfter)
}

func namesFingerprint(db *v1alpha1.Database) string {
	return pki.Fingerprint([]byte(strings.Join(serverNames(db), ",")))
}

// ensureCAExists makes the Database's CA when the cache has no Secret of
// its name (ensureCA reads it, which is a request to the API server).
func (r *Reconciler) ensureCAExists(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	meta := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, caSecretName(db))
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(meta), meta); {
	case err == nil && metav1.IsControlledBy(meta, db):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("failed to get Secret %s: %w", meta.Name, err)
	}
	// Missing, kept by a deleted Database (taken back), or someone
	// else's (a conflict: its key must never sign the operator's client
	// certificates): ensureCA tells which.
	_, _, err := r.ensureCA(ctx, db, obs)
	return err
}

// ensureCA returns the Database's CA, creating it once. It is kept for the
// Database's life: clients trust it, so replacing it would break them.
func (r *Reconciler) ensureCA(ctx context.Context, db *v1alpha1.Database, obs *observation) (cert, key []byte, err error) {
	name := caSecretName(db)
	s := &corev1.Secret{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s)
	if err == nil {
		switch owner := metav1.GetControllerOf(s); {
		case owner != nil && owner.UID == db.UID:
		case owner == nil && s.Labels[labelDatabase] == db.Name:
			if err := r.takeBack(ctx, db, s); err != nil {
				return nil, nil, err
			}
		default:
			obs.found.conflict = fmt.Sprintf("Secret %s exists and does not belong to this Database", name)
			return nil, nil, nil
		}
		return s.Data[pki.CACert], s.Data[pki.CAKey], nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, nil, fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	cert, key, err = pki.NewCA(db.Namespace+"/"+db.Name+" daytwo CA", obs.now, caValidity)
	if err != nil {
		return nil, nil, err
	}
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace, Labels: labels(db)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{pki.CACert: cert, pki.CAKey: key},
	}
	if err := controllerutil.SetControllerReference(db, s, r.Client.Scheme()); err != nil {
		return nil, nil, err
	}
	if err := r.Client.Create(ctx, s); err != nil {
		return nil, nil, fmt.Errorf("failed to create Secret %s: %w", name, err)
	}
	return cert, key, nil
}

// checkUserCertificate reads the Secret spec.tls.serverCertificate names
// and checks that it can be served: a valid pair, chained to its ca.crt,
// carrying the names daytwo's clients connect with.
func (r *Reconciler) checkUserCertificate(ctx context.Context, db *v1alpha1.Database, obs *observation) error {
	name := db.Spec.TLS.ServerCertificate.Name
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		obs.found.tls.problem = fmt.Sprintf("spec.tls.serverCertificate: Secret %s does not exist", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	for _, key := range []string{pki.TLSCert, pki.TLSKey, pki.CACert} {
		if len(s.Data[key]) == 0 {
			obs.found.tls.problem = fmt.Sprintf("spec.tls.serverCertificate: Secret %s has no %s", name, key)
			return nil
		}
	}
	notAfter, err := pki.Verify(s.Data[pki.TLSCert], s.Data[pki.TLSKey], s.Data[pki.CACert], requiredNames(db), pki.Server, obs.now)
	if err != nil {
		obs.found.tls.problem = fmt.Sprintf("spec.tls.serverCertificate: Secret %s: %v", name, err)
		return nil
	}
	obs.found.tls = tlsState{secret: name, version: s.ResourceVersion, ca: pki.Fingerprint(s.Data[pki.CACert]), notAfter: notAfter}
	return nil
}

// syncCredentialsCA writes the served certificate's CA into the
// credentials Secret, with a uri that verifies the server, when the Secret
// does not carry that CA yet: on creation, for a Secret an older daytwo
// made, and when spec.tls changes the CA.
func (r *Reconciler) syncCredentialsCA(ctx context.Context, db *v1alpha1.Database, t tlsState) error {
	name := db.CredentialsSecretName()
	meta := metadataOf(corev1.SchemeGroupVersion.WithKind("Secret"), db.Namespace, name)
	pooled := ""
	if db.Spec.Pooler != nil {
		pooled = poolerHost(db)
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(meta), meta); err == nil && meta.Annotations[annCA] == t.ca &&
		meta.Annotations[annPooler] == pooled {
		return nil
	}
	served := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: t.secret}, served); err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", t.secret, err)
	}
	creds := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, creds); err != nil {
		return fmt.Errorf("failed to get Secret %s: %w", name, err)
	}
	base := creds.DeepCopy()
	if creds.Annotations == nil {
		creds.Annotations = map[string]string{}
	}
	creds.Annotations[annCA], creds.Annotations[annPooler] = t.ca, pooled
	d := creds.Data
	d[v1alpha1.CredentialsCA] = served.Data[pki.CACert]
	d[v1alpha1.CredentialsURI] = []byte(connectionURI(string(d[v1alpha1.CredentialsUser]), string(d[v1alpha1.CredentialsPassword]),
		string(d[v1alpha1.CredentialsHost]), string(d[v1alpha1.CredentialsPort]), string(d[v1alpha1.CredentialsDatabase])))
	setPoolerKeys(db, d)
	if err := r.Client.Patch(ctx, creds, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to write the CA into Secret %s: %w", name, err)
	}
	return nil
}

// certificateIndex indexes Databases by the Secret spec.tls.serverCertificate names.
const certificateIndex = "spec.tls.serverCertificate"

// usingCertificate maps a Secret to the Databases that serve it.
func (r *Reconciler) usingCertificate(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &v1alpha1.DatabaseList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{certificateIndex: obj.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the Databases that serve a Secret", "secret", klog.KObj(obj))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
