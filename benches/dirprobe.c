/* dirprobe: how soon a client of a shared filesystem sees an entry another client made,
 * by one way of looking (BENCHMARKS.md, "Several hosts", the GlusterFS and sshfs probe
 * table). Not part of the build.
 *
 *   gcc -O2 -o /tmp/dirprobe benches/dirprobe.c
 *   /tmp/dirprobe WRITER_DIR READER_DIR MODE SAMPLES INTERVAL_MS
 *   /tmp/dirprobe WRITER_DIR READER_DIR cost:MODE N 0      (wall time per look)
 *
 * WRITER_DIR and READER_DIR are one directory as two clients (two mounts) see it. Each
 * sample waits 0, 0.3, 1 or 2.5 s in turn (looking all the while, every INTERVAL_MS),
 * creates a file through the writer, then looks through the reader every INTERVAL_MS
 * until MODE sees a change: from the create's return to that look. Modes:
 *   stat          statx(AT_STATX_FORCE_SYNC) of the directory (what the poller did)
 *   stat-nosync   plain statx
 *   list          a fresh opendir + full readdir: the set of names
 *   list+stat     full readdir, then the forced statx
 *   list1+stat    opendir, one readdir(), closedir, then the forced statx (what the
 *                 poller does now on GlusterFS)
 *   opendir       opendir + closedir, then the forced statx
 *   open-fstat    open(O_DIRECTORY) + fstat
 *   neg           stat of a missing name in it, then the forced statx
 *   xattr:NAME    getxattr(NAME) of the directory, then the forced statx
 *   keepfd        one directory fd kept open: lseek 0 + getdents, then the forced statx
 *   name          forced statx of the new file's own name (a lookup of a known name)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>

static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static uint64_t fnv(const char*s){uint64_t h=1469598103934665603ULL;while(*s){h^=(unsigned char)*s++;h*=1099511628211ULL;}return h;}
static uint64_t st_dir(const char*d,int force){struct statx s;int fl=AT_SYMLINK_NOFOLLOW|(force?AT_STATX_FORCE_SYNC:0);
 if(statx(AT_FDCWD,d,fl,STATX_BASIC_STATS,&s))return 0;return (uint64_t)s.stx_mtime.tv_sec*1000000007ULL^s.stx_mtime.tv_nsec^((uint64_t)s.stx_ctime.tv_nsec<<20)^s.stx_nlink*31;}
static uint64_t list_dir(const char*d){DIR*dp=opendir(d);if(!dp)return 0;uint64_t h=0,n=0;struct dirent*e;while((e=readdir(dp))){h^=fnv(e->d_name);n++;}closedir(dp);return h^(n<<56);}
static const char*mode;static const char*rd;static char xname[256];
static uint64_t probe(const char*expect){
 char p[4096];
 if(!strcmp(mode,"stat"))return st_dir(rd,1);
 if(!strcmp(mode,"stat-nosync"))return st_dir(rd,0);
 if(!strcmp(mode,"list"))return list_dir(rd);
 if(!strcmp(mode,"name")){snprintf(p,sizeof p,"%s/%s",rd,expect);struct statx s;return statx(AT_FDCWD,p,AT_STATX_FORCE_SYNC,STATX_BASIC_STATS,&s)==0?1:0;}
 if(!strncmp(mode,"xattr:",6)){char buf[4096];getxattr(rd,mode+6,buf,sizeof buf);return st_dir(rd,1);}
 if(!strcmp(mode,"xattrval")){char buf[4096];ssize_t n=getxattr(rd,xname,buf,sizeof buf);if(n<0)return errno;buf[n<4095?n:4095]=0;return fnv(buf)^n;}
 if(!strcmp(mode,"neg")){snprintf(p,sizeof p,"%s/.probe-none",rd);struct stat s;stat(p,&s);return st_dir(rd,1);}
 if(!strcmp(mode,"opendir")){DIR*dp=opendir(rd);if(dp)closedir(dp);return st_dir(rd,1);}
 if(!strcmp(mode,"list1+stat")){DIR*dp=opendir(rd);if(dp){readdir(dp);closedir(dp);}return st_dir(rd,1);}
 if(!strcmp(mode,"keepfd")){static int fd=-1;if(fd<0)fd=open(rd,O_RDONLY|O_DIRECTORY);char b[4096];lseek(fd,0,SEEK_SET);syscall(SYS_getdents64,fd,b,sizeof b);return st_dir(rd,1);}
 if(!strcmp(mode,"keepfd-small")){static int fd2=-1;if(fd2<0)fd2=open(rd,O_RDONLY|O_DIRECTORY);char b[64];lseek(fd2,0,SEEK_SET);syscall(SYS_getdents64,fd2,b,sizeof b);return st_dir(rd,1);}
 if(!strcmp(mode,"cost")){return 0;}
 if(!strcmp(mode,"list+stat")){list_dir(rd);return st_dir(rd,1);}
 if(!strcmp(mode,"open-fstat")){int fd=open(rd,O_RDONLY|O_DIRECTORY);struct stat s;fstat(fd,&s);close(fd);return s.st_mtim.tv_nsec^s.st_mtime;}
 fprintf(stderr,"mode?\n");exit(2);}
int main(int c,char**v){
 if(c<6){fprintf(stderr,"probe WDIR RDIR MODE SAMPLES INTERVAL_MS [xattrname]\n");return 2;}
 const char*wd=v[1];rd=v[2];mode=v[3];int n=atoi(v[4]);int iv=atoi(v[5]);if(c>6)snprintf(xname,sizeof xname,"%s",v[6]);
 if(!strncmp(mode,"cost:",5)){mode=mode+5;double t=now();for(int i=0;i<n;i++)probe("x");printf("%-14s %.3f ms/probe\n",mode,(now()-t)/n);return 0;}
 int gaps[]={0,300,1000,2500};double lat[1000];char name[64]="";
 uint64_t seen=probe("x");
 for(int i=0;i<n;i++){
  double until=now()+gaps[i%4];
  while(now()<until){uint64_t s=probe("x");seen=s;usleep(iv*1000);}
  snprintf(name,sizeof name,"t%d.%d",getpid(),i);char p[4096];snprintf(p,sizeof p,"%s/%s",wd,name);
  double t0=now();int fd=open(p,O_CREAT|O_WRONLY|O_EXCL,0644);if(fd<0){perror(p);return 1;}close(fd);
  double t1=now();
  for(;;){uint64_t s=probe(name);if(strcmp(mode,"name")?s!=seen:s==1){seen=s;break;}if(now()-t0>30000){printf("timeout\n");break;}usleep(iv*1000);}
  lat[i]=now()-t1;
 }
 for(int i=0;i<n;i++)for(int j=i+1;j<n;j++)if(lat[j]<lat[i]){double t=lat[i];lat[i]=lat[j];lat[j]=t;}
 printf("%-14s n=%d iv=%dms p50 %.0f ms p90 %.0f ms max %.0f ms\n",mode,n,iv,lat[n/2],lat[(int)((n-1)*0.9+0.5)],lat[n-1]);
 return 0;}
